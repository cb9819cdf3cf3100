// mightyETL operator console: progressive enhancement only. Every page is
// complete without this script. It (1) refreshes the first page of the job
// list every 5 seconds from /api/ops/jobs, pausing while the operator
// interacts (focus in the filters or the table, pointer over the table, tab
// hidden, or the pause button), and (2) counts a lease's expiry down from
// the database-clock value the page was rendered with. Same-origin requests
// only; no external code.
(function () {
  "use strict";
  function text(tag, value, cls) {
    var el = document.createElement(tag);
    if (cls) { el.className = cls; }
    el.textContent = value;
    return el;
  }
  function fmt(iso) { return iso ? iso.replace("T", " ").replace(/\.\d+Z$/, "Z") : ""; }

  var status = document.getElementById("live-status");
  var table = document.getElementById("jobs-table");
  if (status && table && !table.dataset.before) {
    var url = status.dataset.liveUrl;
    var paused = false, hover = false;
    var button = document.createElement("button");
    button.type = "button";
    button.id = "live-toggle";
    button.textContent = "Pause live refresh";
    button.addEventListener("click", function () {
      paused = !paused;
      button.textContent = paused ? "Resume live refresh" : "Pause live refresh";
      note();
    });
    status.after(button);
    table.addEventListener("mouseenter", function () { hover = true; note(); });
    table.addEventListener("mouseleave", function () { hover = false; note(); });
    var interacting = function () {
      var a = document.activeElement;
      return hover || document.hidden || (a && a !== document.body && (a.closest("form") || a.closest("table")));
    };
    var note = function (msg) {
      status.textContent = msg || (paused ? "Live refresh paused." : interacting() ? "Live refresh waits while you interact." : "Live: refreshes every 5 seconds.");
    };
    var render = function (data) {
      var body = document.getElementById("jobs-body");
      var rows = document.createDocumentFragment();
      (data.jobs || []).forEach(function (j) {
        var tr = document.createElement("tr");
        var td = document.createElement("td");
        var a = document.createElement("a");
        a.href = "/console/jobs/" + j.jobRecordId;
        a.appendChild(text("code", j.jobRecordId));
        td.appendChild(a); tr.appendChild(td);
        td = document.createElement("td");
        td.appendChild(text("span", j.jobStatus, "status status-" + j.jobStatus.toLowerCase()));
        tr.appendChild(td);
        tr.appendChild(text("td", j.jobKind));
        td = document.createElement("td"); td.appendChild(text("code", j.owner)); tr.appendChild(td);
        tr.appendChild(text("td", j.attemptCount + " / " + j.maxAttempts));
        tr.appendChild(text("td", j.code || ""));
        tr.appendChild(text("td", fmt(j.createdAt)));
        tr.appendChild(text("td", fmt(j.updatedAt)));
        rows.appendChild(tr);
      });
      if (!data.jobs || data.jobs.length === 0) {
        var tr = document.createElement("tr");
        var td = text("td", "No job matches."); td.colSpan = 8; tr.appendChild(td); rows.appendChild(tr);
      }
      body.replaceChildren(rows);
    };
    var tick = function () {
      if (paused || interacting()) { note(); return; }
      fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
        .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.json(); })
        .then(function (data) { render(data); note("Live: updated " + new Date().toLocaleTimeString() + "."); })
        .catch(function () { note("Live refresh failed; retrying."); });
    };
    note();
    setInterval(tick, 5000);
  }

  var countdown = document.getElementById("lease-countdown");
  if (countdown) {
    var left = parseFloat(countdown.dataset.seconds);
    var start = performance.now();
    setInterval(function () {
      var s = left - (performance.now() - start) / 1000;
      countdown.textContent = s > 0 ? "in " + s.toFixed(0) + " s" : "expired " + (-s).toFixed(0) + " s ago";
    }, 1000);
  }
})();
