package console_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// durationRE matches a Go time.Duration's String form as the console
// prints a claim state's age: "700ms", "1.5s", "2m0.7s", "1h2m3s".
const durationRE = `(([0-9]+h)?([0-9]+m)?[0-9.]+s|[0-9.]+(ms|µs|ns))`

// ownersTableJS reads the overview's owners table: one line per row, its
// cells joined by "|".
const ownersTableJS = `Array.from(document.querySelectorAll("#owners-table tbody tr")).map(
  tr => Array.from(tr.cells).map(td => td.textContent.trim()).join("|")).join("\n")`

// TestConsoleOwnersInBrowser drives the overview's "Claimable jobs by
// owner" table and the job list's priority filter in headless chromium
// against a real intake, worker and PostgreSQL: the owners (hash prefixes
// only) most claimable first with their counts by priority, the oldest
// claimable age by the database clock, weights and claim states, the
// totals (with MIGHTYETL_CONSOLE_SCREENSHOTS=1 its screenshot goes to
// docs/console/overview-owners.png); then the job list filtered to one priority, before and after the
// script's live refresh redraws it.
func TestConsoleOwnersInBrowser(t *testing.T) {
	chrome := chromiumPath(t)
	s := startStack(t)
	ctx := context.Background()

	// The worker's one slot runs a long diagnostic job, so the jobs below
	// stay claimable.
	running := s.submit("/api/etl/diagnostic-jobs", "owners-run-000000001", `{"durationMillis":600000}`)
	s.waitStatus(running, "RUNNING")
	alice, bob, carol := auth.ScopeHash([]byte(s.hashKey), "alice"), auth.ScopeHash([]byte(s.hashKey), "bob"),
		auth.ScopeHash([]byte(s.hashKey), "carol")
	aliceHigh := pgtest.InsertN(t, s.pool, 3, pg.NewJob{PrincipalScopeHash: alice, Priority: 1})
	pgtest.InsertN(t, s.pool, 1, pg.NewJob{PrincipalScopeHash: alice, Priority: 4})
	pgtest.InsertN(t, s.pool, 2, pg.NewJob{PrincipalScopeHash: bob, Priority: 3})
	var now time.Time
	if err := s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	// Carol's one job is scheduled an hour ahead: not claimable, so not
	// listed; her owner row is "scheduled".
	pgtest.InsertJobs(t, s.pool, pg.NewJob{PrincipalScopeHash: carol, NotBefore: now.Add(time.Hour)})
	pgtest.MakeAvailable(t, s.pool, aliceHigh[0], 2*time.Minute)
	if _, _, err := pg.SetOwnerWeights(ctx, s.pool, []pg.OwnerWeight{{PrincipalScopeHash: bob, Weight: 3}}); err != nil {
		t.Fatal(err)
	}

	bctx, _ := openBrowser(t, chrome, s.basic("operator"))
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		browserDo(t, bctx, what, actions...)
	}
	get := func(what string, a chromedp.Action[string]) string {
		t.Helper()
		return browserGet(t, bctx, what, a)
	}

	step("overview", chromedp.Navigate(s.base+"/console/"), chromedp.WaitVisible(chromedp.ID("owners-table")))
	if os.Getenv("MIGHTYETL_CONSOLE_SCREENSHOTS") == "1" {
		shot := browserGet(t, bctx, "screenshot", chromedp.FullScreenshot(100))
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "console", "overview-owners.png"), shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if basis := get("owners basis", chromedp.Text(chromedp.ID("owners-basis"))); basis != "Exact counts by the database clock." {
		t.Fatalf("owners basis %q, want exact counts", basis)
	}
	rows := strings.Split(get("owners table", chromedp.Evaluate[string](ownersTableJS)), "\n")
	if len(rows) != 2 {
		t.Fatalf("owners table rows %q, want alice and bob", rows)
	}
	// Owner | Claimable | P1 | P2 | P3 | P4 | Oldest claimable | Weight | Claim state
	aliceRow := regexp.MustCompile(`^` + alice[:8] + `\|4\|3\|0\|0\|1\|[2-9]m[0-9]+s\|1\|due for ` + durationRE + `$`)
	bobRow := regexp.MustCompile(`^` + bob[:8] + `\|2\|0\|0\|2\|0\|([0-9]+m)?[0-9]+s\|3\|due for ` + durationRE + `$`)
	if !aliceRow.MatchString(rows[0]) || !bobRow.MatchString(rows[1]) {
		t.Fatalf("owners table:\n%s\nwant alice (4: 3 of priority 1, 1 of 4, oldest 2 min, weight 1, due) then bob (2 of priority 3, weight 3, due)",
			strings.Join(rows, "\n"))
	}
	totals := strings.Join(strings.Fields(get("owners totals", chromedp.Text(chromedp.ID("owners-totals")))), " ")
	for _, want := range []string{"Claimable jobs 6", "1: 3, 2: 0, 3: 2, 4: 1", "Owners with claimable jobs 2",
		"3: 2 due, 0 idle, 1 scheduled, 0 parked; 1 with a weight other than 1"} {
		if !strings.Contains(totals, want) {
			t.Fatalf("owners totals lack %q:\n%s", want, totals)
		}
	}
	page := get("overview text", chromedp.Text(chromedp.CSS("main")))
	for _, h := range []string{alice, bob, carol} {
		if strings.Contains(page, h[:9]) {
			t.Fatalf("the overview shows more of a principal scope hash than its 8-character prefix:\n%s", page)
		}
	}
	if strings.Contains(page, carol[:8]) {
		t.Fatalf("the overview lists carol, who has nothing claimable:\n%s", page)
	}

	// The job list filtered to priority 4 from the form: alice's one job,
	// its Priority cell 4; the live refresh (console.js) draws the same.
	step("jobs", chromedp.Navigate(s.base+"/console/jobs"), chromedp.WaitVisible(chromedp.ID("jobs-body")))
	step("priority filter", chromedp.SetValue(chromedp.CSS("select[name=priority]"), "4"),
		chromedp.Click(chromedp.CSS("#job-filter button[type=submit]")),
		chromedp.WaitReady(chromedp.CSS(`select[name=priority] option[selected]`)))
	if u := get("filtered url", chromedp.Evaluate[string](`location.search`)); !strings.Contains(u, "priority=4") {
		t.Fatalf("the filter form sent %q", u)
	}
	const priorityCells = `Array.from(document.querySelectorAll("#jobs-body tr")).map(tr => {
	  const i = Array.from(document.querySelectorAll("#jobs-table thead th")).findIndex(th => th.textContent.trim() === "Priority");
	  return tr.cells.length + ":" + (i < 0 ? "no Priority column" : tr.cells[i].textContent.trim());
	}).join(",")`
	if got := get("priority cells", chromedp.Evaluate[string](priorityCells)); got != "9:4" {
		t.Fatalf("priority 4 rows (cells:priority) %q, want one row 9:4", got)
	}
	func() {
		ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
		defer cancel()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("live-status").textContent.startsWith("Live: updated")`)); err != nil {
			t.Fatalf("no live refresh of the jobs page: %v", err)
		}
	}()
	if got := get("priority cells after a live refresh", chromedp.Evaluate[string](priorityCells)); got != "9:4" {
		t.Fatalf("after a live refresh, priority 4 rows (cells:priority) %q, want one row 9:4", got)
	}
	// A PENDING filter with a priority offers no bulk cancel (its audit
	// row could not record the priority); the confirmation page refuses.
	step("pending priority 4", chromedp.Navigate(s.base+"/console/jobs?state=PENDING&priority=4"), chromedp.WaitVisible(chromedp.ID("h-bulk")))
	if n := get("bulk links", chromedp.Evaluate[string](`String(document.querySelectorAll("a.button.danger").length)`)); n != "0" {
		t.Fatalf("%s bulk cancel links with a priority filter", n)
	}
	if code, _, body := s.do("GET", "/console/bulk-cancel?state=PENDING&priority=4", "operator", "", ""); code != 400 ||
		!strings.Contains(string(body), "does not filter by priority") {
		t.Fatalf("bulk cancel review with a priority filter: %d", code)
	}
}
