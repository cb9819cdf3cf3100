package faultinject

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// goleak.VerifyTestMain exits; the shared builds go first via Cleanup.
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { RemoveSharedBuilds() }))
}

// Run settings. MIGHTYETL_FAULT_DURATION sets the fault time (default 60s;
// the soak is 30m, see docs/reliability.md); MIGHTYETL_FAULT_SEED replays a
// run's fault order and job mix (the timing still differs).
const (
	durationEnv     = "MIGHTYETL_FAULT_DURATION"
	seedEnv         = "MIGHTYETL_FAULT_SEED"
	defaultDuration = 60 * time.Second
	// settle is how long producers go on after the last fault, so the
	// last fault's recovery is measured too.
	settle = 5 * time.Second
	// finishWithin bounds the retries of the submissions in flight when
	// producing stops; convergeWithin bounds the wait for every job to
	// be terminal and the outbox empty.
	finishWithin   = 2 * time.Minute
	convergeWithin = 3 * time.Minute
)

// TestFaultInjection runs the real binaries (intake, three workers) on a
// private PostgreSQL and NATS for MIGHTYETL_FAULT_DURATION while producers
// submit over HTTP and NATS and the injector kills, restarts, resets and
// slows the parts; then it lets the system converge and proves the
// invariants of docs/reliability.md. It asserts no timing, only the
// invariants; it prints faults, recovery times, RSS and goroutines.
func TestFaultInjection(t *testing.T) {
	dur := defaultDuration
	if v := os.Getenv(durationEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive Go duration such as 60s or 30m", durationEnv, v)
		}
		dur = d
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(seedEnv); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want an unsigned integer", seedEnv, v)
		}
		seed = s
	}
	t.Logf("fault time %s, seed %d (%s=%d replays the fault order and job mix)", dur, seed, seedEnv, seed)

	runDir := scenarioRunDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), dur+15*time.Minute)
	defer cancel()
	started := time.Now()
	sys := startScenario(ctx, t, Config{RunDir: runDir}, "PostgreSQL, NATS (the workers' database through the fault proxy)")
	defer sys.Stop(context.WithoutCancel(ctx))

	sampler := NewSampler(sys)
	sampler.SampleOnce(ctx)
	sampleCtx, stopSampling := context.WithCancel(ctx)
	samplingDone := make(chan struct{})
	go func() {
		defer close(samplingDone)
		sampler.Run(sampleCtx, min(max(dur/60, 2*time.Second), 30*time.Second))
	}()

	ledger := NewLedger()
	stopCtx, stopProducing := context.WithCancel(ctx)
	finishCtx, stopFinishing := context.WithCancel(ctx)
	defer stopFinishing()
	producers, err := StartProducers(stopCtx, finishCtx, sys, ledger, seed)
	if err != nil {
		stopProducing()
		stopFinishing()
		t.Fatalf("start producers: %v", err)
	}

	injector := NewInjector(sys, seed)
	faultCtx, endFaults := context.WithTimeout(ctx, dur)
	injErr := injector.Run(faultCtx)
	endFaults()
	faults := injector.Faults()
	if injErr != nil {
		t.Errorf("fault injection stopped: %v", injErr)
	}
	sleep(ctx, settle)
	stopProducing()
	finishTimer := time.AfterFunc(finishWithin, stopFinishing)
	_ = producers.Wait()
	finishTimer.Stop()
	stopFinishing()

	convergeStart := time.Now()
	convErr := WaitConverged(ctx, sys.DB, convergeWithin)
	if convErr != nil {
		t.Errorf("did not converge: %v", convErr)
	} else {
		t.Logf("converged %s after the producers stopped", time.Since(convergeStart).Round(time.Millisecond))
	}
	stopSampling()
	<-samplingDone
	sampler.SampleOnce(ctx)

	checker := &Checker{DB: sys.DB, NATSURL: sys.NATS.URL(), Prefix: sys.Prefix, HashKey: sys.HashKey,
		Ledger: ledger, Faults: faults, Procs: sys.Processes()}
	report, err := checker.Check(ctx)
	if err != nil {
		t.Fatalf("checker: %v", err)
	}
	recoveries, err := Recoveries(ctx, sys.DB, faults, ledger.AckTimes())
	if err != nil {
		t.Fatalf("recoveries: %v", err)
	}

	t.Logf("faults injected and recovery (time from the fault to the next acknowledged submission / next job reaching a terminal state):\n%s", RecoveryTable(recoveries))
	t.Logf("checker:\n%s", report.Summary())
	t.Logf("answers: %s", formatCounts(ledger.Responses()))
	for _, p := range sys.Processes() {
		st := p.Stats()
		t.Logf("%s: %d starts, %d failed starts (database down), %d unexpected exits", p.Name, st.Starts, st.FailedStarts, st.UnexpectedExits)
	}
	t.Logf("RSS and goroutines (%s):\n%s", "first/last/max sample; * = since the last restart", sampler.Table())
	t.Logf("total %s (fault time %s)", time.Since(started).Round(time.Second), dur)

	var timeline []string
	for _, f := range faults {
		line := fmt.Sprintf("%s +%s %s %s down %s", f.At.Format(time.RFC3339Nano), f.At.Sub(started).Round(time.Millisecond), f.Kind, f.Target, f.Down.Round(time.Millisecond))
		if f.Err != nil {
			line += " error: " + f.Err.Error()
		}
		timeline = append(timeline, line)
	}
	_ = WriteFile(filepath.Join(runDir, "faults.txt"), timeline)
	if len(report.Details) > 0 {
		_ = WriteFile(filepath.Join(runDir, "violations.txt"), report.Details)
	}
	if n := report.Total(); n > 0 {
		t.Errorf("%d invariant violations (details with ids in violations.txt of the run directory)", n)
		return
	}
	if convErr == nil {
		checkerSelfTest(ctx, t, sys, ledger, checker)
	}
}

func formatCounts(m map[string]int) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%q=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
