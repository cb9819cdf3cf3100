package faultinject

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Failover scenario bounds. The scenario waits on conditions (counts of
// acknowledgements and finished jobs), never on the clock; these bound the
// waits.
const (
	// warmAcks and warmFinished: load is flowing before the fault.
	warmAcks, warmFinished = 30, 10
	// mustLoseAcks: with asynchronous replication, this many submissions
	// made after the standby stopped receiving are acknowledged by the old
	// primary before it is killed, so the loss is never zero by chance.
	mustLoseAcks = 10
	// afterAcks: acknowledgements on the new primary before producing stops.
	afterAcks = 30
	// resumeFloor is issue 31's floor: a job finishes on the new primary
	// within this long of the promotion (database clock).
	resumeFloor  = 15 * time.Second
	failoverWait = 2 * time.Minute
)

// TestPostgresFailoverSynchronous kills the primary under HTTP and NATS load
// while a synchronous standby (synchronous_standby_names, synchronous_commit
// on) follows it, promotes the standby and resets its
// synchronous_standby_names as an HA manager does. The binaries reach the
// new primary through their multi-host DATABASE_URL
// (target_session_attrs=read-write). Then every invariant holds with no
// loss accepted: no acknowledged job is lost, no effect is duplicated,
// every job ends; and a job finishes on the new primary within 15 s of the
// promotion.
func TestPostgresFailoverSynchronous(t *testing.T) {
	t.Parallel()
	runFailover(t, ReplicationSync)
}

// TestPostgresFailoverAsynchronous is the same with an asynchronous
// standby that stopped receiving WAL shortly before the kill (a partition
// between the nodes; under plain load the lag is too short to lose
// anything reliably). Acknowledged jobs committed on the old primary after
// that are gone: the checker counts them (Report.AckedAbsent) and the test
// requires that count to equal the acknowledged job ids missing from the
// new primary, computed on their own from the producers' ledger, and to
// include every submission made after the standby stopped. Every other
// invariant holds: no duplicate or half-written job, every surviving job
// ends.
func TestPostgresFailoverAsynchronous(t *testing.T) {
	t.Parallel()
	runFailover(t, ReplicationAsync)
}

func runFailover(t *testing.T, mode Replication) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("replication %s, seed %d", mode, seed)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	started := time.Now()
	sys := startScenario(ctx, t, Config{Workers: 2, Replication: mode},
		fmt.Sprintf("primary and %s standby (multi-host DATABASE_URL), NATS", mode))
	defer sys.Stop(context.WithoutCancel(ctx))

	ledger := NewLedger()
	stopCtx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	finishCtx, stopFinishing := context.WithCancel(ctx)
	defer stopFinishing()
	producers, err := StartProducers(stopCtx, finishCtx, sys, ledger, seed)
	if err != nil {
		t.Fatalf("start producers: %v", err)
	}
	if err := waitFor(ctx, failoverWait, 50*time.Millisecond, "load before the fault", func() bool {
		return len(ledger.AckTimes()) >= warmAcks && finishedJobs(ctx, sys) >= warmFinished
	}); err != nil {
		t.Fatal(err)
	}

	// With asynchronous replication the standby stops receiving first;
	// every submission the producers begin after that and the old primary
	// acknowledges is committed on the old primary only.
	var afterStall map[*Submission]bool
	var lagBytes int64
	if mode == ReplicationAsync {
		if err := sys.Standby.StopReceiving(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		// Submissions the ledger holds now may have committed before the
		// walreceiver exited; only later ones are surely the old primary's.
		before := map[*Submission]bool{}
		for _, s := range ledger.Submissions() {
			before[s] = true
		}
		afterStall = map[*Submission]bool{}
		if err := waitFor(ctx, failoverWait, 20*time.Millisecond, "acknowledgements only the old primary has", func() bool {
			n := 0
			for _, s := range ledger.Submissions() {
				if !before[s] && s.State().Acked {
					afterStall[s] = true
					n++
				}
			}
			return n >= mustLoseAcks
		}); err != nil {
			t.Fatal(err)
		}
		primaryPos, perr := sys.PG.WALPosition(ctx)
		standbyPos, serr := sys.Standby.WALPosition(ctx)
		if err := errors.Join(perr, serr); err != nil {
			t.Fatalf("WAL positions: %v", err)
		}
		lagBytes = primaryPos - standbyPos
		// Everything acknowledged so far after the stall is lost, not
		// only the first mustLoseAcks: take them all now.
		for _, s := range ledger.Submissions() {
			if !before[s] && s.State().Acked {
				afterStall[s] = true
			}
		}
	}

	acksBefore := len(ledger.AckTimes())
	ft, err := sys.Failover(ctx)
	if err != nil {
		t.Fatalf("failover: %v", err)
	}
	t.Logf("primary killed (pg_ctl stop -m immediate) and standby promoted, synchronous_standby_names reset: %s from the kill's start to the reset",
		ft.Outage.Round(time.Millisecond))

	var resumed time.Duration
	if err := waitFor(ctx, failoverWait, 50*time.Millisecond, "jobs to finish and submissions to be acknowledged on the new primary", func() bool {
		r, err := ResumedAfter(ctx, sys, ft.Promoted)
		resumed = r
		return err == nil && r >= 0 && len(ledger.AckTimes()) >= acksBefore+afterAcks
	}); err != nil {
		t.Fatal(err)
	}
	stopProducing()
	finishTimer := time.AfterFunc(finishWithin, stopFinishing)
	_ = producers.Wait()
	finishTimer.Stop()
	stopFinishing()

	if err := WaitConverged(ctx, sys.DB, convergeWithin); err != nil {
		t.Errorf("did not converge: %v", err)
	}
	checker := &Checker{DB: sys.DB, NATSURL: sys.NATS.URL(), Prefix: sys.Prefix, HashKey: sys.HashKey,
		Ledger: ledger, Procs: sys.Processes(), AcceptLoss: mode == ReplicationAsync,
		Faults: []Fault{{Kind: "postgres_failover", At: ft.Killed, Down: ft.Outage}}}
	report, err := checker.Check(ctx)
	if err != nil {
		t.Fatalf("checker: %v", err)
	}
	missing, acked, err := ackedMissing(ctx, sys, ledger)
	if err != nil {
		t.Fatal(err)
	}
	cancelsLost, cancelsAcked, err := cancelsUndone(ctx, sys, ledger)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checker:\n%s", report.Summary())
	t.Logf("answers: %s", formatCounts(ledger.Responses()))
	t.Logf("failover figures: processing resumed %s after the promotion (first job finished on the new primary, database clock); "+
		"acknowledged %d, acknowledged and absent after the failover %d (checker %d); "+
		"cancellations acknowledged %d, ended otherwise %d (checker %d); terminal events of undone transitions %d",
		resumed.Round(time.Millisecond), acked, missing, report.AckedAbsent, cancelsAcked, cancelsLost, report.CancelsLost, report.StaleEvents)
	if len(report.Details) > 0 {
		_ = WriteFile(filepath.Join(sys.cfg.RunDir, "violations.txt"), report.Details)
	}

	if n := report.Total(); n > 0 {
		t.Errorf("%d invariant violations (details with ids in violations.txt of the run directory)", n)
	}
	if report.AckedAbsent != missing {
		t.Errorf("the checker counts %d acknowledged keys absent after the failover; the ledger's acknowledged job ids missing from the new primary are %d", report.AckedAbsent, missing)
	}
	if report.CancelsLost != cancelsLost {
		t.Errorf("the checker counts %d acknowledged cancellations lost; the ledger's acknowledged cancellations of jobs not CANCELLED on the new primary are %d", report.CancelsLost, cancelsLost)
	}
	if resumed > resumeFloor {
		t.Errorf("the first job finished %s after the promotion; the floor is %s", resumed.Round(time.Millisecond), resumeFloor)
	}
	switch mode {
	case ReplicationSync:
		if missing != 0 || cancelsLost != 0 {
			t.Errorf("synchronous replication lost %d acknowledged jobs and %d acknowledged cancellations", missing, cancelsLost)
		}
	case ReplicationAsync:
		lost := 0
		for s := range afterStall {
			if present, err := jobExists(ctx, sys, s.State().JobIDs); err != nil {
				t.Fatal(err)
			} else if !present {
				lost++
			}
		}
		t.Logf("loss window: the standby was %d bytes of WAL behind at the kill; %d submissions begun after it stopped receiving were acknowledged, %d of them are absent",
			lagBytes, len(afterStall), lost)
		if lost != len(afterStall) {
			t.Errorf("%d of %d jobs acknowledged only by the old primary survived the failover", len(afterStall)-lost, len(afterStall))
		}
		if missing < len(afterStall) {
			t.Errorf("%d acknowledged jobs absent, fewer than the %d acknowledged after the standby stopped", missing, len(afterStall))
		}
	}
	t.Logf("total %s", time.Since(started).Round(time.Second))
}

// finishedJobs is how many jobs are terminal (0 when the query fails).
func finishedJobs(ctx context.Context, sys *System) int {
	var n int
	_ = sys.DB.QueryRow(ctx, `SELECT count(*) FROM etl_job_records WHERE job_status IN ('SUCCEEDED', 'FAILED', 'CANCELLED')`).Scan(&n)
	return n
}

// ackedMissing counts, from the producers' ledger alone, the acknowledged
// submissions whose acknowledged job id has no row on the (new) primary:
// by job id, where the checker goes by principal and key hash.
func ackedMissing(ctx context.Context, sys *System, ledger *Ledger) (missing, acked int, err error) {
	var ids []string
	for _, s := range ledger.Submissions() {
		if st := s.State(); st.Acked {
			acked++
			ids = append(ids, st.JobIDs...)
		}
	}
	var present int
	if err := sys.DB.QueryRow(ctx, `SELECT count(*) FROM etl_job_records WHERE job_record_id = ANY($1::uuid[])`, ids).Scan(&present); err != nil {
		return 0, 0, err
	}
	return len(ids) - present, acked, nil
}

// cancelsUndone counts, from the producers' ledger and job ids, the
// acknowledged cancellations (200) whose job exists on the (new) primary
// but is not CANCELLED.
func cancelsUndone(ctx context.Context, sys *System, ledger *Ledger) (undone, acked int, err error) {
	var ids []string
	for _, s := range ledger.Submissions() {
		if st := s.State(); st.CancelAns == CancelDone {
			acked++
			ids = append(ids, st.JobIDs...)
		}
	}
	err = sys.DB.QueryRow(ctx, `SELECT count(*) FROM etl_job_records WHERE job_record_id = ANY($1::uuid[]) AND job_status <> 'CANCELLED'`, ids).Scan(&undone)
	return undone, acked, err
}

// jobExists reports whether any of ids is a job on the primary.
func jobExists(ctx context.Context, sys *System, ids []string) (bool, error) {
	var n int
	err := sys.DB.QueryRow(ctx, `SELECT count(*) FROM etl_job_records WHERE job_record_id = ANY($1::uuid[])`, ids).Scan(&n)
	return n > 0, err
}

// scenarioRunDir is a fresh run directory for one scenario: removed when
// the test passes, kept (and named in the log) when it fails.
func scenarioRunDir(t *testing.T) string {
	t.Helper()
	runDir, err := os.MkdirTemp("", "mightyetl-faultinject-run-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("run directory kept (process logs, faults.txt, violations.txt): %s", runDir)
			return
		}
		_ = os.RemoveAll(runDir)
	})
	return runDir
}

// scenarioModuleRoot is the module's root directory.
func scenarioModuleRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := ModuleRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// startScenario starts the system of cfg (ModuleDir and RunDir filled in
// when empty) and logs how long the start
// took and what runs (what: the parts, for the log line).
func startScenario(ctx context.Context, t *testing.T, cfg Config, what string) *System {
	t.Helper()
	if cfg.ModuleDir == "" {
		cfg.ModuleDir = scenarioModuleRoot(t)
	}
	if cfg.RunDir == "" {
		cfg.RunDir = scenarioRunDir(t)
	}
	started := time.Now()
	sys, err := StartSystem(ctx, cfg)
	if errors.Is(err, ErrMissingTool) {
		t.Fatal(err) // one line naming the fix
	}
	if err != nil {
		t.Fatalf("start the system: %v", err)
	}
	t.Logf("system up in %s: %s, intake, %d workers", time.Since(started).Round(time.Millisecond), what, len(sys.Workers))
	return sys // the caller defers sys.Stop
}
