package console_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	dto "github.com/prometheus/client_model/go"

	"github.com/mightyetl/mightyetl/internal/app"
	"github.com/mightyetl/mightyetl/internal/app/apptest"
	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

// chromiumPath finds Debian's chromium (MIGHTYETL_CHROMIUM overrides) or
// fails the test with one line naming the fix. Never skips.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("MIGHTYETL_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium not found: run `apt-get install -y chromium` (.ci/run does) or set MIGHTYETL_CHROMIUM")
	return ""
}

// stack is a real intake (HTTP API + console, Basic auth) and a real
// worker on a fresh database.
type stack struct {
	t      *testing.T
	base   string
	pass   map[string]string
	worker *app.WorkerProcess
	// pool is the stack's database, for fixtures and checks.
	pool *pgxpool.Pool
	// hashKey is MIGHTYETL_PRINCIPAL_HASH_KEY.
	hashKey string
	// client is the test's own HTTP client; its idle keep-alive
	// connections are closed at cleanup, so goleak sees no transport
	// goroutines left.
	client *http.Client
}

func startStack(t *testing.T) *stack {
	t.Helper()
	pool, url := pgtest.NewDatabase(t)
	dir := t.TempDir()
	pass := map[string]string{"operator": "operator-password-1", "alice": "alice-password-1"}
	var lines []string
	for p, pw := range pass {
		line, err := auth.CredentialLine(p, []byte(pw))
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, line)
	}
	creds := filepath.Join(dir, "credentials")
	if err := os.WriteFile(creds, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"DATABASE_URL":                      url,
		"MIGHTYETL_HTTP_ADDR":               "127.0.0.1:0",
		"MIGHTYETL_AUTH_MODE":               "basic",
		"MIGHTYETL_BASIC_CREDENTIALS_FILE":  creds,
		"MIGHTYETL_PRINCIPAL_HASH_KEY":      "console-test-principal-hash-key-0123456789",
		"MIGHTYETL_DIAGNOSTIC_JOBS_ENABLED": "true",
		"MIGHTYETL_OPERATOR_PRINCIPALS":     "operator",
		"MIGHTYETL_CONSOLE_BULK_CANCEL_CAP": "3",
		"MIGHTYETL_WORKER_ID":               "console-test-worker-1",
		"MIGHTYETL_WORKER_CONCURRENCY":      "1",
		"MIGHTYETL_WORKER_POLL_INTERVAL":    "100ms",
		"MIGHTYETL_LEASE_DURATION":          "3s",
		"MIGHTYETL_MAX_ATTEMPTS":            "1",
		"MIGHTYETL_SHUTDOWN_GRACE_PERIOD":   "2s",
		// No retention here: it would remove the fixtures' terminal loads.
		"MIGHTYETL_MAINTENANCE_ENABLED": "false",
	}
	getenv := func(k string) string { return env[k] }
	ctx := context.Background()
	// The API alone (no NATS bridge).
	in := apptest.Intake(t, getenv, "console-test")
	srv := in.Server
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	wp := apptest.WorkerProcess(t, getenv)
	if err := wp.Start(ctx); err != nil {
		t.Fatal(err)
	}
	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	return &stack{t: t, base: "http://" + srv.Addr(), pass: pass, worker: wp, pool: pool,
		hashKey: env["MIGHTYETL_PRINCIPAL_HASH_KEY"], client: &http.Client{Transport: transport}}
}

func (s *stack) basic(principal string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(principal+":"+s.pass[principal]))
}

// do sends one request as principal ("" sends no credentials).
func (s *stack) do(method, path, principal, key, body string) (int, http.Header, []byte) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.base+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	if principal != "" {
		req.Header.Set("Authorization", s.basic(principal))
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := s.client.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, b
}

// submit posts a job as alice and returns its id.
func (s *stack) submit(path, key, body string) string {
	s.t.Helper()
	code, _, b := s.do("POST", path, "alice", key, body)
	if code != http.StatusAccepted {
		s.t.Fatalf("submit: %d %s", code, b)
	}
	var r struct {
		JobRecordID string `json:"jobRecordId"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		s.t.Fatal(err)
	}
	return r.JobRecordID
}

func (s *stack) status(id string) string {
	s.t.Helper()
	_, _, b := s.do("GET", "/api/etl/jobs/"+id, "alice", "", "")
	var r struct {
		JobStatus string `json:"jobStatus"`
	}
	_ = json.Unmarshal(b, &r)
	return r.JobStatus
}

func (s *stack) waitStatus(id, want string) {
	s.t.Helper()
	testwait.For(s.t, 60*time.Second, "job "+want, func() bool { return s.status(id) == want })
}

// workerOutcome reads mightyetl_worker_outcomes_total{outcome}.
func (s *stack) workerOutcome(outcome string) float64 {
	mfs, err := s.worker.Registry.Gather()
	if err != nil {
		s.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "mightyetl_worker_outcomes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelIs(m, "outcome", outcome) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func labelIs(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// openBrowser starts headless chromium (a fresh profile) that sends
// authorization on every request and records every URL it requests
// (requested returns a copy). It stops at the end of t.
func openBrowser(t *testing.T, chrome, authorization string) (ctx context.Context, requested func() []string) {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chrome),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	var mu sync.Mutex
	var urls []string
	if err := chromedp.Listen(bctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok && e.Request != nil {
			mu.Lock()
			urls = append(urls, e.Request.URL)
			mu.Unlock()
		}
	}); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	if _, err := chromedp.Call(bctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(bctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
		Headers: network.Headers{"Authorization": authorization}}); err != nil {
		t.Fatal(err)
	}
	return bctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(urls)
	}
}

// browserDo runs actions within a minute; on failure it fails t with the
// page's address and text.
func browserDo(t *testing.T, bctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		dctx, dcancel := context.WithTimeout(bctx, 10*time.Second)
		defer dcancel()
		page, _ := chromedp.Run(dctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText`))
		t.Fatalf("%s: %v; page:\n%s", what, err, page)
	}
}

// browserGet runs a within a minute and returns its value.
func browserGet[T any](t *testing.T, bctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// TestConsoleInBrowser drives the console in headless chromium against a
// real intake, worker and PostgreSQL. With MIGHTYETL_CONSOLE_SCREENSHOTS=1
// it also writes each page's screenshot to docs/console/.
func TestConsoleInBrowser(t *testing.T) {
	chrome := chromiumPath(t)
	s := startStack(t)

	// Access: no credentials 401 with the Basic challenge; a non-operator 403.
	for _, p := range []string{"/console/", "/console/jobs", "/console/workers"} {
		code, h, _ := s.do("GET", p, "", "", "")
		if code != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Basic ") {
			t.Fatalf("%s without credentials: %d %q", p, code, h.Get("WWW-Authenticate"))
		}
		if code, _, _ := s.do("GET", p, "alice", "", ""); code != http.StatusForbidden {
			t.Fatalf("%s as a non-operator: %d", p, code)
		}
		if code, _, _ := s.do("GET", p, "operator", "", ""); code != http.StatusOK {
			t.Fatalf("%s as an operator: %d", p, code)
		}
	}
	if code, _, _ := s.do("GET", "/api/ops/jobs", "alice", "", ""); code != http.StatusForbidden {
		t.Fatalf("/api/ops/jobs as a non-operator: %d", code)
	}

	// Real data: two jobs that succeed, one that fails, one that runs
	// (and holds the only slot), then five that stay PENDING behind it (after the cancel the freed slot claims one).
	const rec = `[{"id":"a1","name":"jane","amount":"999.9"},{"id":"a2","email":"X@Y.Z"}]`
	ok1 := s.submit("/api/etl/jobs", "console-ok-000000001", rec)
	ok2 := s.submit("/api/etl/jobs", "console-ok-000000002", rec)
	failed := s.submit("/api/etl/diagnostic-jobs", "console-fail-0000001", `{"durationMillis":1,"records":[{"id":"f1"}],"failWith":"permanent"}`)
	s.waitStatus(ok1, "SUCCEEDED")
	s.waitStatus(ok2, "SUCCEEDED")
	s.waitStatus(failed, "FAILED")
	// The running job is a diagnostic job without records (it only waits),
	// the pending ones carry three records each.
	running := s.submit("/api/etl/diagnostic-jobs", "console-run-00000001", `{"durationMillis":600000}`)
	s.waitStatus(running, "RUNNING")
	var pending []string
	for i := range 5 {
		pending = append(pending, s.submit("/api/etl/diagnostic-jobs", fmt.Sprintf("console-pend-%07d", i), `{"durationMillis":600000,"records":[{"id":"p1"},{"id":"p2"},{"id":"p3"}]}`))
	}

	// The browser: fresh profile, every request recorded.
	bctx, requested := openBrowser(t, chrome, s.basic("operator"))
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		browserDo(t, bctx, what, actions...)
	}
	get := func(what string, a chromedp.Action[string]) string {
		t.Helper()
		return browserGet(t, bctx, what, a)
	}
	count := func(sel string) int {
		t.Helper()
		ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
		defer cancel()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll(`+strconv.Quote(sel)+`).length`))
		if err != nil {
			t.Fatalf("count %s: %v", sel, err)
		}
		return n
	}
	shots := map[string][]byte{}
	shot := func(name string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
		defer cancel()
		b, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		shots[name] = b
	}

	// Overview. The console has one sample of the counters (a rate needs
	// two, SampleEvery = 30 s apart), so the chart says when its first rate
	// comes, and still draws its axes with units and time labels.
	step("overview", chromedp.Navigate(s.base+"/console/"), chromedp.WaitVisible(chromedp.CSS("h1")))
	text := get("overview text", chromedp.Text(chromedp.CSS("main")))
	shot("overview")
	for _, want := range []string{"Pending", "Running", "Outbox and relay", "Terminal outcomes", "etl_diagnostic_requested_failure"} {
		if !strings.Contains(text, want) {
			t.Fatalf("overview lacks %q:\n%s", want, text)
		}
	}
	rateStatus := get("rate status", chromedp.Evaluate[string](`(document.getElementById("rate-status") || {}).textContent || ""`))
	if !regexp.MustCompile(`^Collecting samples: the first rate appears after ([1-9]|[12][0-9]|30) s\.`).MatchString(rateStatus) {
		t.Fatalf("rate chart status %q, want the collecting-samples state", rateStatus)
	}
	axis := get("chart axis labels", chromedp.Evaluate[string](
		`Array.from(document.querySelectorAll("svg.chart text")).map(e => e.textContent).join("|")`))
	for _, want := range []string{"jobs/s", "15 min ago", "10 min ago", "5 min ago", "now"} {
		if !slices.Contains(strings.Split(axis, "|"), want) {
			t.Fatalf("rate chart labels %q lack %q", axis, want)
		}
	}

	// Jobs: all nine, then a filter narrows to the failed one.
	step("jobs", chromedp.Navigate(s.base+"/console/jobs"), chromedp.WaitVisible(chromedp.ID("jobs-body")))
	shot("jobs")
	if n := count("#jobs-body tr"); n != 9 {
		t.Fatalf("jobs page shows %d rows, want 9", n)
	}
	// A job id shows as "…" and its last 8 characters (a UUIDv7's first 8
	// are its creation time, the same for every job here), the full id on
	// hover (title) and a copy button that puts the full id on the clipboard.
	checkShortID := func(where, id string) {
		t.Helper()
		sel := strconv.Quote(`a[href="/console/jobs/` + id + `"]`)
		got := get(where+": short id", chromedp.Evaluate[string](`(() => {
			const a = document.querySelector(`+sel+`);
			if (!a) { return "no link"; }
			const b = a.closest(".jobid") && a.closest(".jobid").querySelector("button.copy");
			return a.textContent + "|" + a.title + "|" + (b ? b.textContent : "no copy button");
		})()`))
		if want := "…" + id[len(id)-8:] + "|" + id + "|Copy"; got != want {
			t.Fatalf("%s: job link shows %q, want %q (text|title|button)", where, got, want)
		}
	}
	checkShortID("jobs page", running)
	if _, err := chromedp.CallBrowser(bctx, cdpbrowser.SetPermission, cdpbrowser.SetPermissionParams{
		Permission: &cdpbrowser.PermissionDescriptor{Name: "clipboard-read"}, Setting: cdpbrowser.PermissionSettingGranted,
		Origin: s.base}); err != nil {
		t.Fatal(err)
	}
	// The live refresh waits while the pointer is over the table, so the
	// row clicked is the row read.
	step("copy id", chromedp.Click(chromedp.CSS(`tr:has(a[href="/console/jobs/`+running+`"]) button.copy`)),
		chromedp.WaitVisible(chromedp.CSS(`tr:has(a[href="/console/jobs/`+running+`"]) button.copy.copied`)))
	if got := get("clipboard", chromedp.Evaluate[string](`navigator.clipboard.readText()`, chromedp.EvalAwaitPromise)); got != running {
		t.Fatalf("the copy button put %q on the clipboard, want %q", got, running)
	}
	step("filter", chromedp.SetValue(chromedp.CSS("select[name=state]"), "FAILED"),
		chromedp.Click(chromedp.CSS("#job-filter button[type=submit]")),
		// The filtered page, not the one the click left: the failed row is
		// visible on both, but only the server marks FAILED as selected.
		chromedp.WaitReady(chromedp.CSS(`select[name=state] option[selected]`)),
		chromedp.WaitVisible(chromedp.CSS(`#jobs-body .status-failed`)))
	text = get("filtered rows", chromedp.Text(chromedp.ID("jobs-body")))
	if n := count("#jobs-body tr"); n != 1 || count(`#jobs-body a[href="/console/jobs/`+failed+`"]`) != 1 {
		t.Fatalf("FAILED filter shows %d rows: %s", n, text)
	}

	// Workers: the worker holds the running job's lease.
	step("workers", chromedp.Navigate(s.base+"/console/workers"), chromedp.WaitVisible(chromedp.CSS("h1")))
	text = get("workers text", chromedp.Text(chromedp.CSS("main")))
	shot("workers")
	if !strings.Contains(text, "console-test-worker-1") || !strings.Contains(text, "renewing") {
		t.Fatalf("workers page:\n%s", text)
	}

	// A narrow window (800 px): the page does not scroll sideways, and the
	// jobs table's last column is in view once its own scroll container is
	// scrolled to the end.
	step("narrow jobs", chromedp.EmulateViewport(800, 900), chromedp.Navigate(s.base+"/console/jobs"),
		chromedp.WaitVisible(chromedp.ID("jobs-body")))
	shot("jobs-narrow")
	narrowLayout := `(() => {
		const th = Array.from(document.querySelectorAll("#jobs-table thead th")).find(e => e.textContent.trim() === "Updated");
		if (!th) { return "no Updated header"; }
		const page = document.documentElement;
		if (page.scrollWidth > window.innerWidth) { return "the page scrolls sideways: " + page.scrollWidth + " px wide in " + window.innerWidth; }
		let box = th.parentElement;
		while (box && box !== document.body && !["auto", "scroll"].includes(getComputedStyle(box).overflowX)) { box = box.parentElement; }
		if (box && box !== document.body) { box.scrollLeft = box.scrollWidth; }
		const r = th.getBoundingClientRect();
		if (r.left < 0 || r.right > window.innerWidth) { return "Updated header at " + r.left + ".." + r.right + " in " + window.innerWidth; }
		return "ok";
	})()`
	if layout := get("narrow layout", chromedp.Evaluate[string](narrowLayout)); layout != "ok" {
		t.Fatalf("jobs table at 800 px: %s", layout)
	}
	// The rows the live refresh draws (console.js) look the same: short id,
	// title, copy button, and the same layout.
	func() {
		ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
		defer cancel()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("live-status").textContent.startsWith("Live: updated")`)); err != nil {
			t.Fatalf("no live refresh of the jobs page: %v", err)
		}
	}()
	checkShortID("jobs page after a live refresh", running)
	if layout := get("narrow layout after a live refresh", chromedp.Evaluate[string](narrowLayout)); layout != "ok" {
		t.Fatalf("jobs table at 800 px after a live refresh: %s", layout)
	}
	step("wide again", chromedp.EmulateViewport(1280, 900))

	// A PENDING diagnostic job holds its payload: its record count shows.
	step("pending detail", chromedp.Navigate(s.base+"/console/jobs/"+pending[4]), chromedp.WaitVisible(chromedp.ID("cancel-job")))
	if records := get("record count", chromedp.Text(chromedp.ID("records"))); records != "3" {
		t.Fatalf("PENDING diagnostic job shows records %q, want 3", records)
	}
	if p := get("default priority", chromedp.Text(chromedp.ID("job-priority"))); p != "2" || count("#job-not-before") != 0 {
		t.Fatalf("PENDING job shows priority %q and %d not-before rows", p, count("#job-not-before"))
	}
	// A scheduled job of priority 1 shows both (Mightyetl-Priority and
	// Mightyetl-Not-Before on its submission).
	at := time.Now().Add(time.Hour).UTC()
	sreq, err := http.NewRequest("POST", s.base+"/api/etl/jobs", strings.NewReader(`[{"id":"s1"}]`))
	if err != nil {
		t.Fatal(err)
	}
	sreq.Header = http.Header{"Authorization": {s.basic("alice")}, "Idempotency-Key": {"console-sched-000001"},
		"Content-Type": {"application/json"}, "Mightyetl-Priority": {"1"}, "Mightyetl-Not-Before": {at.Format(time.RFC3339)}}
	sres, err := s.client.Do(sreq)
	if err != nil {
		t.Fatal(err)
	}
	var scheduled struct {
		JobRecordID string `json:"jobRecordId"`
	}
	if err := json.NewDecoder(sres.Body).Decode(&scheduled); err != nil || sres.StatusCode != http.StatusAccepted {
		t.Fatalf("scheduled submit: %d %v", sres.StatusCode, err)
	}
	_ = sres.Body.Close()
	step("scheduled detail", chromedp.Navigate(s.base+"/console/jobs/"+scheduled.JobRecordID), chromedp.WaitVisible(chromedp.ID("job-not-before")))
	if p, nb := get("priority", chromedp.Text(chromedp.ID("job-priority"))), get("not before", chromedp.Text(chromedp.ID("job-not-before"))); p != "1" ||
		!strings.HasPrefix(nb, at.Format("2006-01-02 15:04:05Z")) {
		t.Fatalf("scheduled job shows priority %q, not before %q (want 1, %s)", p, nb, at.Format("2006-01-02 15:04:05Z"))
	}
	// The owner cancels it (a scheduled job is PENDING), so the bulk
	// cancel below sees the jobs it always did.
	if code, _, b := s.do("POST", "/api/etl/jobs/"+scheduled.JobRecordID+"/cancellation", "alice", "console-sched-cancel1", ""); code != http.StatusOK {
		t.Fatalf("cancel the scheduled job: %d %s", code, b)
	}
	// A FAILED job keeps no payload; its replay form asks for the body of
	// its kind (a diagnostic job's is an object, not an array of records).
	step("failed detail", chromedp.Navigate(s.base+"/console/jobs/"+failed), chromedp.WaitVisible(chromedp.ID("replay-body")))
	if records := get("failed records", chromedp.Text(chromedp.ID("records"))); records != "not kept: a terminal job keeps no payload, only its digest" {
		t.Fatalf("FAILED job shows records %q", records)
	}
	if label := get("diagnostic replay label", chromedp.Text(chromedp.CSS(`label[for="replay-body"]`))); label !=
		`Original request body (a JSON object {"durationMillis", "records", "failWith"}, as submitted)` {
		t.Fatalf("diagnostic replay form label %q", label)
	}

	// Detail of the running job, then cancel it from there.
	step("detail", chromedp.Navigate(s.base+"/console/jobs/"+running), chromedp.WaitVisible(chromedp.ID("cancel-job")))
	text = get("detail text", chromedp.Text(chromedp.CSS("main")))
	shot("job")
	for _, want := range []string{"RUNNING", "console-test-worker-1", "Fencing token", "1 / 1", "by the database clock"} {
		if !strings.Contains(text, want) {
			t.Fatalf("detail lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "terminal") {
		t.Fatalf("the RUNNING job's page speaks of a terminal job:\n%s", text)
	}
	if records := get("running records", chromedp.Text(chromedp.ID("records"))); records != "none: a diagnostic job submitted without records" {
		t.Fatalf("RUNNING diagnostic job without records shows records %q", records)
	}
	cancelledBefore := s.workerOutcome(metrics.OutcomeCancelled)
	step("cancel", chromedp.Click(chromedp.ID("cancel-job")), chromedp.WaitVisible(chromedp.CSS(".notice")))
	if st := get("state after cancel", chromedp.Text(chromedp.ID("job-state"))); st != "CANCELLED" {
		t.Fatalf("after cancel the page shows %q", st)
	}
	if st := s.status(running); st != "CANCELLED" {
		t.Fatalf("owner API sees %s after the operator's cancel", st)
	}
	testwait.For(t, 60*time.Second, "the running handler stops", func() bool {
		return s.workerOutcome(metrics.OutcomeCancelled) > cancelledBefore
	})

	// Bulk cancel of PENDING jobs: the confirmation states the capped count.
	step("bulk review", chromedp.Navigate(s.base+"/console/jobs?state=PENDING"),
		chromedp.WaitVisible(chromedp.CSS("a.button.danger")),
		chromedp.Click(chromedp.CSS("a.button.danger")), chromedp.WaitVisible(chromedp.ID("bulk-count")))
	text = get("bulk count", chromedp.Text(chromedp.ID("bulk-count")))
	shot("bulk-cancel")
	if !strings.Contains(text, "This cancels 3 PENDING jobs") || !strings.Contains(text, "cap of 3") {
		t.Fatalf("bulk confirmation: %q", text)
	}
	step("bulk confirm", chromedp.Click(chromedp.ID("confirm-bulk")), chromedp.WaitVisible(chromedp.CSS(".notice")))
	if text = get("bulk notice", chromedp.Text(chromedp.CSS(".notice"))); text != "Cancelled 3 jobs." {
		t.Fatalf("bulk notice %q", text)
	}
	byOperator := 0
	for _, id := range append(pending, running) {
		_, _, b := s.do("GET", "/api/ops/jobs/"+id, "operator", "", "")
		if strings.Contains(string(b), `"code":"etl_job_cancelled_by_operator"`) {
			byOperator++
		}
	}
	if byOperator != 4 {
		t.Fatalf("%d jobs cancelled by the operator, want 4 (1 + the bulk cap of 3)", byOperator)
	}

	// Replay of a FAILED etl_records job of alice's from its detail page.
	// First the worker's one slot is freed (the owner cancels what is left
	// of the diagnostic jobs). The source failed after its attempts (a row
	// as the worker's terminal failure leaves it: no payload, only the
	// digest of the body alice sent).
	for i, id := range pending {
		s.do("POST", "/api/etl/jobs/"+id+"/cancellation", "alice", fmt.Sprintf("console-owner-cancel-%04d", i), "")
	}
	source := uuid.Must(uuid.NewV7())
	digest := sha256.Sum256([]byte(rec))
	keyHash := sha256.Sum256([]byte("console-replay-source"))
	if _, err := s.pool.Exec(context.Background(), `INSERT INTO etl_job_records (job_record_id, job_kind,
		principal_scope_hash, submission_key_hash, request_digest, request_payload, job_status, failure_code,
		attempt_count, max_attempts) VALUES ($1, 'etl_records', decode($2, 'hex'), $3, $4, NULL, 'FAILED', 'etl_target_unavailable', 1, 1)`,
		source, auth.ScopeHash([]byte(s.hashKey), "alice"), keyHash[:], digest[:]); err != nil {
		t.Fatalf("failed source: %v", err)
	}
	step("replay form", chromedp.Navigate(s.base+"/console/jobs/"+source.String()),
		chromedp.WaitVisible(chromedp.ID("replay-body")))
	if label := get("replay label", chromedp.Text(chromedp.CSS(`label[for="replay-body"]`))); label != "Original request body (a JSON array of records, as submitted)" {
		t.Fatalf("etl_records replay form label %q", label)
	}
	step("replay form filled",
		chromedp.SetValue(chromedp.ID("replay-body"), rec),
		chromedp.Click(chromedp.ID("replay-confirm")))
	shot("job-replay")
	step("replay", chromedp.Click(chromedp.ID("replay-job")), chromedp.WaitVisible(chromedp.CSS(".notice")))
	href := get("replay job url", chromedp.Evaluate[string](`location.pathname`))
	child := strings.TrimPrefix(href, "/console/jobs/")
	if _, err := uuid.Parse(child); err != nil || child == source.String() {
		t.Fatalf("after replay the browser is at %q", href)
	}
	text = get("replay job text", chromedp.Text(chromedp.CSS("main")))
	if !strings.Contains(text, "Replay created: this job replays the one named under Replay lineage.") || !strings.Contains(text, "Generation 1: replays source") {
		t.Fatalf("replay job page:\n%s", text)
	}
	checkShortID("replay lineage", source.String())
	s.waitStatus(child, "SUCCEEDED")
	var loaded []string
	rows, err := s.pool.Query(context.Background(), `SELECT data FROM processed_data WHERE job_record_id = $1 ORDER BY data`, child)
	if err == nil {
		loaded, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if want := []string{"ID:a1,NAME:JANE,AMOUNT:999.90,", "ID:a2,EMAIL:x@y.z,"}; err != nil || !slices.Equal(loaded, want) {
		t.Fatalf("the replay loaded %v, %v; want %v", loaded, err, want)
	}
	step("source lists the replay", chromedp.Navigate(s.base+"/console/jobs/"+source.String()),
		chromedp.WaitVisible(chromedp.CSS(`a[href="/console/jobs/`+child+`"]`)))

	// The Audit page, reached from the navigation, lists the actions above
	// newest first: the replay (linking the job it made), then the bulk
	// cancel with its count, then the single cancel.
	step("audit", chromedp.Click(chromedp.CSS(`nav a[href="/console/audit"]`)), chromedp.WaitVisible(chromedp.ID("audit-table")),
		chromedp.WaitVisible(chromedp.CSS(`#audit-table a[href="/console/jobs/`+child+`"]`)))
	text = get("audit text", chromedp.Text(chromedp.ID("audit-table")))
	replayAt, bulkAt := strings.Index(text, "replay"), strings.Index(text, "bulk_cancel")
	if replayAt < 0 || bulkAt < replayAt || !strings.Contains(text[bulkAt:], "\t3\tok") ||
		!strings.Contains(text[bulkAt+len("bulk_cancel"):], "\tcancel\t") {
		t.Fatalf("audit page:\n%s", text)
	}

	// A cross-origin POST is refused even with the operator's credentials.
	req, _ := http.NewRequest("POST", s.base+"/console/jobs/"+pending[3]+"/cancel", strings.NewReader("csrf=x"))
	req.Header.Set("Authorization", s.basic("operator"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://evil.example")
	if res, err := s.client.Do(req); err != nil || res.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-origin cancel: %v %v", res, err)
	} else {
		res.Body.Close()
	}

	// Nothing outside the console's origin was requested.
	if len(requested()) < 8 {
		t.Fatalf("only %d requests recorded", len(requested()))
	}
	for _, u := range requested() {
		if !strings.HasPrefix(u, s.base+"/") && !strings.HasPrefix(u, "data:") && u != "about:blank" {
			t.Fatalf("request outside the console's origin: %s", u)
		}
	}

	if os.Getenv("MIGHTYETL_CONSOLE_SCREENSHOTS") == "1" {
		for name, b := range shots {
			if err := os.WriteFile(filepath.Join("..", "..", "docs", "console", name+".png"), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
