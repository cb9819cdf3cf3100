// mightyETL operator console: progressive enhancement only. Every page is
// complete without this script. It (1) refreshes the first page of the job
// list every 5 seconds from /api/ops/jobs, pausing while the operator
// interacts (focus in the filters or the table, pointer over the table, tab
// hidden, or the pause button), (2) counts a lease's expiry down from
// the database-clock value the page was rendered with, (3) refreshes a
// large job's progress section on its page every 5 seconds, and (4) adds a copy
// button to every job id ([data-copy]): it writes the full id with
// navigator.clipboard, or, where that is missing or refused (a page not
// served from a secure context), shows the id selected in a read-only field
// to copy by hand. Same-origin requests only; no external code; no inline
// handlers (the Content-Security-Policy allows only this file's script).
(function () {
  "use strict";
  function text(tag, value, cls) {
    var el = document.createElement(tag);
    if (cls) { el.className = cls; }
    el.textContent = value;
    return el;
  }
  function fmt(iso) { return iso ? iso.replace("T", " ").replace(/\.\d+Z$/, "Z") : ""; }

  // addCopy appends a copy button for el's data-copy value (once).
  function addCopy(el) {
    var id = el.dataset.copy;
    if (!id || el.querySelector("button.copy")) { return; }
    var b = text("button", "Copy", "copy");
    b.type = "button";
    b.title = "Copy the full job id " + id;
    var done = function (label) {
      b.textContent = label;
      b.classList.add("copied");
      setTimeout(function () { b.textContent = "Copy"; b.classList.remove("copied"); }, 2000);
    };
    var fallback = function () {
      var f = el.querySelector("input.copy-fallback");
      if (!f) {
        f = document.createElement("input");
        f.className = "copy-fallback";
        f.readOnly = true;
        f.size = id.length;
        f.value = id;
        f.setAttribute("aria-label", "Job id");
        f.addEventListener("blur", function () { f.remove(); });
        el.appendChild(f);
      }
      f.focus();
      f.select();
      b.textContent = "Press Ctrl+C";
    };
    b.addEventListener("click", function () {
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(id).then(function () { done("Copied"); }, fallback);
      } else {
        fallback();
      }
    });
    el.appendChild(b);
  }
  // stamp is a table cell with a time as the server renders it: date and
  // clock, each kept on one line.
  function stamp(iso) {
    var td = document.createElement("td");
    td.className = "time";
    fmt(iso).split(" ").forEach(function (part, i) {
      if (i > 0) { td.appendChild(document.createTextNode(" ")); }
      td.appendChild(text("span", part, "nowrap"));
    });
    return td;
  }
  // jobID is a job id as the server's "jobid" template renders it.
  function jobID(id) {
    var span = document.createElement("span");
    span.className = "jobid";
    span.dataset.copy = id;
    var a = document.createElement("a");
    a.href = "/console/jobs/" + id;
    a.title = id;
    a.appendChild(text("code", "\u2026" + id.slice(-8)));
    span.appendChild(a);
    addCopy(span);
    return span;
  }
  document.querySelectorAll("[data-copy]").forEach(addCopy);

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
        td.appendChild(jobID(j.jobRecordId)); tr.appendChild(td);
        td = document.createElement("td");
        td.appendChild(text("span", j.jobStatus, "status status-" + j.jobStatus.toLowerCase()));
        tr.appendChild(td);
        tr.appendChild(text("td", j.jobKind));
        td = document.createElement("td"); td.appendChild(text("code", j.owner)); tr.appendChild(td);
        tr.appendChild(text("td", String(j.priority), "num"));
        tr.appendChild(text("td", j.attemptCount + " / " + j.maxAttempts));
        td = document.createElement("td");
        td.className = "code";
        (j.code || "").split("_").forEach(function (part, i) {
          if (i > 0) { td.appendChild(document.createTextNode("_")); td.appendChild(document.createElement("wbr")); }
          td.appendChild(document.createTextNode(part));
        });
        tr.appendChild(td);
        tr.appendChild(stamp(j.createdAt));
        tr.appendChild(stamp(j.updatedAt));
        rows.appendChild(tr);
      });
      if (!data.jobs || data.jobs.length === 0) {
        var tr = document.createElement("tr");
        var td = text("td", "No job matches."); td.colSpan = 9; tr.appendChild(td); rows.appendChild(tr);
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

  // A large job's progress (job page): the section is rendered again every
  // 5 seconds from this page's own URL, which is given the observations the
  // section names (data-seen), so the server's rate is the one between the
  // last two checkpoints seen. A change of the job's state reloads the
  // page; a hidden tab skips its turns.
  var progress = document.getElementById("progress");
  var jobState = document.getElementById("job-state");
  if (progress && jobState && progress.dataset.live === "true") {
    setInterval(function () {
      var cur = document.getElementById("progress");
      if (document.hidden || !cur) { return; }
      fetch(location.pathname + "?seen=" + encodeURIComponent(cur.dataset.seen || ""),
        { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.text(); })
        .then(function (html) {
          var doc = new DOMParser().parseFromString(html, "text/html");
          var next = doc.getElementById("progress"), state = doc.getElementById("job-state");
          if (!next || !state || state.textContent !== jobState.textContent) { location.reload(); return; }
          cur.replaceWith(document.importNode(next, true));
        })
        .catch(function () {
          var live = document.getElementById("progress-live");
          if (live) { live.textContent = "Progress refresh failed; retrying."; }
        });
    }, 5000);
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
