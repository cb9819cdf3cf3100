package faultinject

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mightyetl/mightyetl/internal/codes"
)

// Phase lengths of the version-skew test. They set how long load runs in
// each step of the deploy, not what the test asserts: every assertion waits
// for a condition with a deadline.
const (
	// phaseHold is how long load runs in each step before the next.
	phaseHold = 4 * time.Second
	// gateHold is how long the fleet keeps serving after a migration before
	// the first replacement: longer than one re-check period of the
	// binaries' schema gates (schemagate.DefaultInterval and the worker's
	// SchemaCheckInterval, 10 s), so every binary has judged the new schema
	// by its poll as well as by its live /readyz.
	gateHold = 11 * time.Second
	// progressWithin bounds the wait for a worker or the intake to make
	// progress in a step.
	progressWithin = time.Minute
)

// phase is one step of the deploy and how long it took.
type phase struct {
	name string
	took time.Duration
}

// TestVersionSkewRollingUpgrade builds the previous release (the commit in
// compat/previous-release) and the working tree, and rolls a running fleet
// forward and back under HTTP and NATS load, as an operator would: the
// previous release's etlctl migrates a private PostgreSQL to its schema, its
// intake and two workers serve; the current etlctl applies the newer
// migrations while they serve; the workers are replaced one at a time, then
// the intake (behind a frontend that drains the old one). Then back: the
// current etlctl migrates down to the previous release's schema while the
// current binaries serve, and the previous release's workers and intake
// replace them the same way. It proves the checker's invariants, that no
// job failed but those asked to, that the intake refused submissions only
// with 503 and Retry-After and accepted each on retry, and that the deploy
// really ran skewed: the previous binaries served the newer schema, and
// previous and current workers both finished jobs side by side. It prints
// counts and durations only.
func TestVersionSkewRollingUpgrade(t *testing.T) {
	t.Parallel()
	moduleDir := scenarioModuleRoot(t)
	commit, err := ReadPreviousRelease(moduleDir)
	if err != nil {
		t.Fatal(err)
	}
	runDir := scenarioRunDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	started := time.Now()
	prev, err := BuildRelease(ctx, moduleDir, commit)
	if err != nil {
		t.Fatal(err) // one line: a missing tool or commit names the fix
	}
	prevBuilt := time.Since(started)
	cur, err := CurrentRelease(ctx, moduleDir, filepath.Join(runDir, "current", "bin"))
	if err != nil {
		t.Fatal(err)
	}
	if cur.Schema < prev.Schema {
		t.Fatalf("%s names a release with schema %d, newer than this tree's %d: it must name an older release", PreviousReleaseFile, prev.Schema, cur.Schema)
	}
	newer := cur.MigrationsAfter(prev.Schema)
	t.Logf("previous release %s (schema %d), current tree (schema %d): %d migrations between them; built in %s and %s",
		commit[:12], prev.Schema, cur.Schema, len(newer), prevBuilt.Round(time.Millisecond), (time.Since(started) - prevBuilt).Round(time.Millisecond))

	d, err := StartDeployment(ctx, Config{ModuleDir: moduleDir, RunDir: runDir}, prev)
	if err != nil {
		t.Fatalf("start the previous release's fleet: %v", err)
	}
	defer d.Stop(context.WithoutCancel(ctx))
	if v, err := d.SchemaVersion(ctx); err != nil || v != prev.Schema {
		t.Fatalf("after the previous release's migrate up: schema %d (%v), want %d", v, err, prev.Schema)
	}

	ledger := NewLedger()
	stopCtx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	finishCtx, stopFinishing := context.WithCancel(ctx)
	defer stopFinishing()
	producers, err := StartProducers(stopCtx, finishCtx, d.Sys, ledger, uint64(time.Now().UnixNano()))
	if err != nil {
		t.Fatalf("start producers: %v", err)
	}

	var phases []phase
	step := func(name string, f func() error) {
		t.Helper()
		at := time.Now()
		if err := f(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		phases = append(phases, phase{name, time.Since(at)})
	}
	// finished counts the jobs each release's workers finished, read from
	// a worker's metrics just before it is replaced.
	finished := map[string]float64{}
	replaceWorker := func(i int, rel Release) error {
		if n, err := d.WorkerFinished(ctx, i); err == nil {
			finished[d.WorkerReleases[i].Name] += n
		}
		return d.ReplaceWorker(ctx, i, rel)
	}
	acksAfter := func(at time.Time) bool {
		acks := ledger.AckTimes()
		return len(acks) > 0 && acks[len(acks)-1].After(at)
	}
	allReady := func(what string) error {
		var notReady []string
		err := waitFor(ctx, progressWithin, 100*time.Millisecond, what, func() bool {
			notReady = d.Serving(ctx)
			return len(notReady) == 0
		})
		if err != nil {
			return fmt.Errorf("%v: not ready: %s", err, strings.Join(notReady, ", "))
		}
		return nil
	}
	allSlots := func() map[int]float64 {
		m := map[int]float64{}
		for i := range d.Sys.Workers {
			n, _ := d.WorkerFinished(ctx, i)
			m[i] = n
		}
		return m
	}

	// The previous release under load.
	step("previous release serving", func() error {
		sleep(ctx, phaseHold)
		return d.WaitFinished(ctx, allSlots(), progressWithin)
	})

	// The newer migrations while the previous release serves.
	var migratedUpAt time.Time
	step(fmt.Sprintf("current etlctl migrate up (%d migrations) while the previous release serves", len(newer)), func() error {
		if err := allReady("the previous release ready before the migration"); err != nil {
			return err
		}
		out, err := d.Migrate(ctx, cur, "up")
		if err != nil {
			return err
		}
		migratedUpAt = time.Now()
		if v, err := d.SchemaVersion(ctx); err != nil || v != cur.Schema {
			return fmt.Errorf("schema %d (%v) after migrate up, want %d: %s", v, err, cur.Schema, lastLines([]byte(out), 2))
		}
		return nil
	})
	step("previous release serving the current schema", func() error {
		// /readyz is the binary's live verdict on the schema.
		// Expand/contract (docs/operations/upgrades.md): a release's
		// schema must admit the previous release's binaries.
		if err := allReady("the previous release ready on the current schema (a release's schema must admit the previous release's binaries)"); err != nil {
			return err
		}
		sleep(ctx, time.Until(migratedUpAt.Add(gateHold)))
		gated := time.Now()
		if err := d.WaitFinished(ctx, allSlots(), progressWithin); err != nil {
			return fmt.Errorf("the previous release's workers after a schema-gate period on the current schema: %w", err)
		}
		return waitFor(ctx, progressWithin, 100*time.Millisecond, "the previous intake to acknowledge a submission", func() bool { return acksAfter(gated) })
	})

	// Workers one at a time, then the intake.
	step("worker 1 replaced by the current release", func() error { return replaceWorker(0, cur) })
	step("current and previous workers side by side", func() error {
		// Both generations finish jobs at the same time: the skew is real.
		since := allSlots()
		sleep(ctx, phaseHold)
		if err := d.WaitFinished(ctx, since, progressWithin); err != nil {
			return fmt.Errorf("a current and a previous worker side by side: %w", err)
		}
		return nil
	})
	step("worker 2 replaced by the current release", func() error { return replaceWorker(1, cur) })
	step("intake replaced by the current release", func() error { return d.ReplaceIntake(ctx, cur) })
	step("current release serving", func() error {
		at := time.Now()
		sleep(ctx, phaseHold)
		if err := d.WaitFinished(ctx, allSlots(), progressWithin); err != nil {
			return err
		}
		return waitFor(ctx, progressWithin, 100*time.Millisecond, "the current intake to acknowledge a submission", func() bool { return acksAfter(at) })
	})

	// The way back.
	var migratedDownAt time.Time
	downFrom := cur.Schema
	step(fmt.Sprintf("current etlctl migrate down -to %d while the current release serves", prev.Schema), func() error {
		if v, err := d.SchemaVersion(ctx); err == nil {
			downFrom = v
		}
		if downFrom == prev.Schema {
			migratedDownAt = time.Now()
			return nil // no migration between the releases: nothing to roll back
		}
		out, err := d.Migrate(ctx, cur, "down", "-to", fmt.Sprint(prev.Schema))
		if err != nil {
			return err
		}
		migratedDownAt = time.Now()
		if v, err := d.SchemaVersion(ctx); err != nil || v != prev.Schema {
			return fmt.Errorf("schema %d (%v) after migrate down -to %d: %s", v, err, prev.Schema, lastLines([]byte(out), 2))
		}
		return nil
	})
	var gatedOnPrevious []string
	step("current release serving the previous schema", func() error {
		sleep(ctx, time.Until(migratedDownAt.Add(gateHold)))
		// No progress is required here: a current release that may not
		// run on the previous schema stops (503 with Retry-After, no
		// claims) until the previous release replaces it.
		// A probe may time out on a loaded machine; a gated binary
		// stays not ready, so three probes a second apart tell them apart.
		for range 3 {
			if gatedOnPrevious = d.Serving(ctx); len(gatedOnPrevious) == 0 {
				break
			}
			sleep(ctx, time.Second)
		}
		return nil
	})
	step("worker 1 replaced by the previous release", func() error { return replaceWorker(0, prev) })
	step("previous and current workers side by side", func() error {
		sleep(ctx, phaseHold)
		return nil
	})
	step("worker 2 replaced by the previous release", func() error { return replaceWorker(1, prev) })
	step("intake replaced by the previous release", func() error { return d.ReplaceIntake(ctx, prev) })
	step("previous release serving again", func() error {
		at := time.Now()
		sleep(ctx, phaseHold)
		if err := d.WaitFinished(ctx, allSlots(), progressWithin); err != nil {
			return err
		}
		return waitFor(ctx, progressWithin, 100*time.Millisecond, "the previous intake to acknowledge a submission", func() bool { return acksAfter(at) })
	})

	stopProducing()
	finishTimer := time.AfterFunc(finishWithin, stopFinishing)
	_ = producers.Wait()
	finishTimer.Stop()
	stopFinishing()
	convergeStart := time.Now()
	convErr := WaitConverged(ctx, d.Sys.DB, convergeWithin)
	if convErr != nil {
		t.Errorf("did not converge: %v", convErr)
	}
	phases = append(phases, phase{"producers stopped, every job terminal", time.Since(convergeStart)})
	for i := range d.Sys.Workers {
		if n, err := d.WorkerFinished(ctx, i); err == nil {
			finished[d.WorkerReleases[i].Name] += n
		}
	}

	checker := &Checker{DB: d.Sys.DB, NATSURL: d.Sys.NATS.URL(), Prefix: d.Sys.Prefix, HashKey: d.Sys.HashKey,
		Ledger: ledger, Procs: d.AllProcesses()}
	report, err := checker.Check(ctx)
	if err != nil {
		t.Fatalf("checker: %v", err)
	}
	failedBy, unasked, err := FailedJobs(ctx, d.Sys.DB, ledger)
	if err != nil {
		t.Fatalf("failed jobs: %v", err)
	}

	// The figures: counts and durations only.
	var table strings.Builder
	var deploy time.Duration
	for _, p := range phases {
		fmt.Fprintf(&table, "  %-75s %8s\n", p.name, p.took.Round(time.Millisecond))
		deploy += p.took
	}
	fmt.Fprintf(&table, "  %-75s %8s", "all steps", deploy.Round(time.Millisecond))
	t.Logf("deploy steps:\n%s", table.String())
	var repl []string
	for _, r := range d.Replacements {
		repl = append(repl, fmt.Sprintf("%s->%s stop %s start %s", r.Slot, r.Release, r.Stop.Round(time.Millisecond), r.Start.Round(time.Millisecond)))
	}
	t.Logf("replacements (stop: SIGTERM to exit, %s means killed; start: to /readyz 200): %s", stopGrace, strings.Join(repl, "; "))
	t.Logf("migrations: %d applied up (schema %d -> %d), %d rolled back (schema %d -> %d)",
		len(newer), prev.Schema, cur.Schema, countBetween(cur.Migrations, prev.Schema, downFrom), downFrom, prev.Schema)
	status := map[string]int{}
	for outcome, n := range report.ByOutcome {
		s, _, _ := strings.Cut(outcome, " ")
		status[s] += n
	}
	t.Logf("jobs %d: succeeded %d, failed %d, cancelled %d; failed by reason: %s; failures no submission asked for: %d",
		report.Jobs, status["SUCCEEDED"], status["FAILED"], status["CANCELLED"], formatCounts(failedBy), unasked)
	if len(gatedOnPrevious) > 0 {
		t.Logf("on the previous schema the current release was not ready (%q means gated): %s", "schema version incompatible", strings.Join(gatedOnPrevious, ", "))
	} else {
		t.Logf("on the previous schema the current release stayed ready")
	}
	t.Logf("jobs finished by the previous release's workers %.0f, by the current release's workers %.0f", finished[prev.Name], finished[cur.Name])
	waits := ledger.AcceptWaits()
	refusals := ledger.Refusals()
	nRefusals := 0
	for _, n := range refusals {
		nRefusals += n
	}
	t.Logf("refused submissions %d (%d refusals: %s), accepted on retry %d; time to accept after the first refusal: median %s, max %s",
		len(waits)+ledger.GaveUp(), nRefusals, formatCounts(refusals), len(waits), median(waits), maxDuration(waits))
	t.Logf("answers: %s; frontend errors %d", formatCounts(ledger.Responses()), d.Front.Errors())
	t.Logf("checker:\n%s", report.Summary())
	t.Logf("total %s", time.Since(started).Round(time.Second))

	if len(report.Details) > 0 {
		_ = WriteFile(filepath.Join(runDir, "violations.txt"), report.Details)
	}
	if n := report.Total(); n > 0 {
		t.Errorf("%d invariant violations (details with ids in violations.txt of the run directory)", n)
	}
	if unasked > 0 {
		t.Errorf("%d jobs failed that no submission asked to fail: the deploy failed them", unasked)
	}
	for class, n := range refusals {
		if !strings.HasPrefix(class, "http 503 ") || !strings.HasSuffix(class, " with Retry-After") {
			t.Errorf("%d refusals %q: the intake may refuse a submission only with 503 and Retry-After", n, class)
		}
	}
	if n := d.Front.ClientsGaveUp(); n > 0 {
		t.Logf("%d requests ended by their client's timeout before the intake answered (counted as transport errors above)", n)
	}
	if n := d.Front.Errors(); n > 0 {
		t.Errorf("the frontend could not forward %d requests to an intake", n)
	}
	if finished[prev.Name] == 0 || finished[cur.Name] == 0 {
		t.Errorf("jobs finished by previous %.0f and current %.0f workers: both must have run jobs", finished[prev.Name], finished[cur.Name])
	}
}

// countBetween counts the versions in vs above lo and at most hi.
func countBetween(vs []int64, lo, hi int64) int {
	n := 0
	for _, v := range vs {
		if v > lo && v <= hi {
			n++
		}
	}
	return n
}

func median(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)/2].Round(time.Millisecond).String()
}

func maxDuration(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	return slices.Max(ds).Round(time.Millisecond).String()
}

// TestProducersHonourRetryAfter: the producers the version-skew test relies
// on wait at least an intake's Retry-After before they retry a 503, retry
// with the same key, and the ledger records each refusal by class and each
// refused submission's time to acceptance. An intake stand-in refuses the
// first request of every key with 503 etl_schema_incompatible and
// Retry-After: 1, and accepts the second.
func TestProducersHonourRetryAfter(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		seen[key]++
		n := seen[key]
		mu.Unlock()
		switch {
		case n == 1:
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"errorCode":"` + codes.SchemaIncompatible + `"}`))
		case strings.HasSuffix(r.URL.Path, "/cancellation"):
			w.WriteHeader(http.StatusOK)
		default:
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write([]byte(`{"jobRecordId":"` + uuid.NewString() + `"}`))
		}
	}))
	defer srv.Close()
	sys := &System{IntakeURL: srv.URL, HTTP: []Principal{{Name: "p0", Authorization: "Basic eDp5"}, {Name: "p1", Authorization: "Basic eDp5"}}}
	ledger := NewLedger()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stop, stopProducing := context.WithCancel(ctx)
	producers, err := StartProducers(stop, ctx, sys, ledger, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Until a few submissions were refused and then accepted.
	err = waitFor(ctx, 30*time.Second, 50*time.Millisecond, "refused submissions accepted on retry", func() bool {
		return len(ledger.AcceptWaits()) >= 4
	})
	stopProducing()
	_ = producers.Wait()
	if err != nil {
		t.Fatal(err)
	}
	refusals, waits := ledger.Refusals(), ledger.AcceptWaits()
	acked := 0
	for _, s := range ledger.Submissions() {
		if s.State().Acked {
			acked++
		}
	}
	want := "http 503 " + codes.SchemaIncompatible + " with Retry-After"
	if len(refusals) != 1 || refusals[want] != len(ledger.Submissions()) {
		t.Fatalf("refusals %v of %d submissions, want every submission refused once as %q", refusals, len(ledger.Submissions()), want)
	}
	if len(waits) != acked || ledger.GaveUp() != 0 || len(ledger.Unexpected()) != 0 {
		t.Fatalf("%d accept waits, %d acknowledged, %d gave up, unexpected %v", len(waits), acked, ledger.GaveUp(), ledger.Unexpected())
	}
	if waits[0] < time.Second {
		t.Fatalf("a refused submission was retried %s after its refusal, before its Retry-After of 1 s", waits[0])
	}
}

// TestPreviousReleaseFile: compat/previous-release parses (comment lines
// skipped, one full sha), a malformed file is refused, and a commit absent
// from the history fails in one line naming the fix before anything is
// built.
func TestPreviousReleaseFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, "compat"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, PreviousReleaseFile), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sha := strings.Repeat("ab", 20)
	write("# each release updates this\n\n" + sha + "\n")
	if got, err := ReadPreviousRelease(dir); err != nil || got != sha {
		t.Fatalf("ReadPreviousRelease = %q, %v; want %q", got, err, sha)
	}
	for _, bad := range []string{"", "# only a comment\n", "v0.1.0\n", sha[:12] + "\n", strings.ToUpper(sha) + "\n"} {
		write(bad)
		if got, err := ReadPreviousRelease(dir); err == nil {
			t.Errorf("ReadPreviousRelease of %q = %q, want an error", bad, got)
		}
	}

	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	moduleDir, err := ModuleRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	_, err = BuildRelease(context.Background(), moduleDir, strings.Repeat("0", 40))
	if err == nil || !strings.Contains(err.Error(), "is not in this repository's history: fetch it") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("BuildRelease of an absent commit: %v; want one line naming the fix", err)
	}
}
