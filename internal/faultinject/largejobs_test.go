package faultinject

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/client"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

// Large-job scenario settings: chunks of largeChunkRecords records, so
// every load takes tens of chunk transactions; parts of largePartBytes, so
// records span parts.
const (
	largeChunkRecords = 1000
	largePartBytes    = 256 << 10
	// largeKillsPerJob bounds the SIGKILLs of the worker holding each
	// successful job mid-load (each costs a lease expiry, 6 s).
	largeKillsPerJob = 1
	largeWithin      = 3 * time.Minute
	largePurgeWithin = 30 * time.Second
)

// TestLargeJobsUnderWorkerKills runs the real binaries with 1,000-record
// chunks and loads three large JSON Lines jobs (20,000-30,000 records,
// uploaded over HTTP in 256 KiB parts) and a fourth of 40,000 records that
// is cancelled mid-load; while they load, the worker holding each
// successful job's lease is SIGKILLed mid-load and restarted, so the job
// resumes from its committed checkpoint on the next claimant. A reader
// polls processed_data_visible throughout and must never see part of a
// large job. Then, from the database: each successful job SUCCEEDED with
// exactly the transform of its records in processed_data, each once, all
// visible; the cancelled job is CANCELLED with no row visible and its rows
// removed. No timing is asserted.
func TestLargeJobsUnderWorkerKills(t *testing.T) {
	runDir := scenarioRunDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	started := time.Now()
	sys := startScenario(ctx, t, Config{RunDir: runDir,
		WorkerEnv: []string{fmt.Sprintf("MIGHTYETL_CHUNK_RECORDS=%d", largeChunkRecords)}},
		"PostgreSQL, NATS, chunks of 1,000 records")
	defer sys.Stop(context.WithoutCancel(ctx))

	jobs := []*LargeJob{
		{Tag: "large-a", Records: 20_000},
		{Tag: "large-b", Records: 25_000},
		{Tag: "large-c", Records: 30_000},
		{Tag: "large-x", Records: 40_000, Cancel: true},
	}
	cl := largeClient(t, sys)

	reader := &VisibilityReader{DB: sys.DB, Jobs: jobs}
	readCtx, stopReading := context.WithCancel(ctx)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		reader.Run(readCtx, 250*time.Millisecond)
	}()
	defer func() { stopReading(); <-readDone }()

	// Upload and submit the four jobs at once.
	var wg sync.WaitGroup
	errs := make([]error, len(jobs))
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub, err := cl.Upload(ctx, bytes.NewReader(j.Payload()), client.UploadOptions{PartSize: largePartBytes, Key: "faultinject-upload-" + j.Tag})
			if err != nil {
				errs[i] = fmt.Errorf("upload %s: %w", j.Tag, err)
				return
			}
			reader.SetJobID(j, sub.JobID)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("4 large jobs uploaded and submitted %s after the start", time.Since(started).Round(time.Millisecond))

	// Cancel the fourth mid-load, while the kills below go on: once it
	// committed two chunks and before it is done (it needs 40).
	cancelled := jobs[3]
	cancelDone := make(chan string, 1)
	go func() { cancelDone <- cancelMidLoad(ctx, sys, cl, cancelled) }()

	// SIGKILL the worker holding each successful job mid-load (at least two
	// chunks committed, at least three to go), restart it, until every job
	// is terminal.
	kills := map[string]int{}
	var killLog []string
	for {
		var victim *Process
		var victimJob *LargeJob
		var at largeState
		terminal := 0
		testwait.For(t, largeWithin, "a large job mid-load to SIGKILL the worker of, or every large job terminal", func() bool {
			victim, terminal = nil, 0
			spare := "" // the worker loading the job to cancel: the cancellation must find its claim
			if st, err := largeLoadState(ctx, sys, cancelled.JobID); err == nil && (st.status == "PENDING" || st.status == "RUNNING") {
				spare = st.owner
			}
			for _, j := range jobs[:3] {
				st, err := largeLoadState(ctx, sys, j.JobID)
				if err != nil {
					t.Logf("load state of %s: %v", j.Tag, err)
					return false
				}
				switch {
				case st.status != "PENDING" && st.status != "RUNNING":
					terminal++
				case victim == nil && kills[j.JobID] < largeKillsPerJob && st.status == "RUNNING" && st.owner != "" &&
					st.chunks >= 2 && st.loaded <= j.Records-3*largeChunkRecords && st.owner != spare:
					for _, w := range sys.Workers {
						if "faultinject-"+w.Name == st.owner {
							victim, victimJob, at = w, j, st
						}
					}
				}
			}
			return victim != nil || terminal == len(jobs)-1
		})
		if victim == nil {
			break
		}
		kills[victimJob.JobID]++
		if !victim.Kill() {
			t.Fatalf("%s was not running", victim.Name)
		}
		victim.Restart()
		if err := victim.WaitReady(ctx, readyWithin); err != nil {
			t.Fatalf("restart %s: %v", victim.Name, err)
		}
		killLog = append(killLog, fmt.Sprintf("%s SIGKILLed holding %s at %d chunks (%d records)", victim.Name, victimJob.Tag, at.chunks, at.loaded))
	}
	if msg := <-cancelDone; msg != "" {
		t.Log(msg)
	}
	for _, line := range killLog {
		t.Log(line)
	}
	if len(killLog) == 0 {
		t.Errorf("no worker was SIGKILLed while holding a large job mid-load")
	}
	stopReading()
	<-readDone

	checkStart := time.Now()
	report, err := CheckLargeJobs(ctx, sys.DB, jobs)
	if err != nil {
		t.Fatalf("large-job checker: %v", err)
	}
	t.Logf("large-job checker read %d rows in %s", jobs[0].Records+jobs[1].Records+jobs[2].Records, time.Since(checkStart).Round(time.Millisecond))
	polls, pollErrs, complete, vis := reader.Result()
	t.Logf("visibility reader: %d polls (%d failed), %d of 3 jobs seen wholly visible, %d violations", polls, pollErrs, complete, vis.Total())
	for _, j := range jobs[:3] {
		st, err := largeLoadState(ctx, sys, j.JobID)
		if err != nil {
			t.Fatalf("load state of %s: %v", j.Tag, err)
		}
		t.Logf("%s: %s, %d records in %d chunks, attempts %d, killed %d times", j.Tag, st.status, st.loaded, st.chunks, st.attempts, kills[j.JobID])
	}
	t.Logf("total %s", time.Since(started).Round(time.Second))
	if polls == 0 {
		t.Errorf("the visibility reader never read")
	}
	details := append(report.Details, vis.Details...)
	if len(details) > 0 {
		_ = WriteFile(filepath.Join(runDir, "violations.txt"), details)
	}
	for inv, n := range report.Violations {
		t.Errorf("%d violations of %q", n, inv)
	}
	for inv, n := range vis.Violations {
		t.Errorf("%d violations of %q (visibility reader)", n, inv)
	}
	if report.Total()+vis.Total() > 0 {
		t.Logf("details with ids in violations.txt of the run directory")
		return
	}
	largeCheckerSelfTest(ctx, t, sys, jobs)
}

// largeCheckerSelfTest proves the large-job checker and the visibility
// reader are not vacuous: a copy of one row of the first job and a deleted
// row of the second (what a chunk loaded twice or lost would leave) are
// each found by both.
func largeCheckerSelfTest(ctx context.Context, t *testing.T, sys *System, jobs []*LargeJob) {
	t.Helper()
	if _, err := sys.DB.Exec(ctx, `INSERT INTO processed_data (job_record_id, data, normalized_record)
		SELECT job_record_id, data, normalized_record FROM processed_data WHERE job_record_id = $1::uuid LIMIT 1`, jobs[0].JobID); err != nil {
		t.Fatalf("self-test: copy a row: %v", err)
	}
	if _, err := sys.DB.Exec(ctx, `DELETE FROM processed_data WHERE processed_data_id =
		(SELECT min(processed_data_id) FROM processed_data WHERE job_record_id = $1::uuid)`, jobs[1].JobID); err != nil {
		t.Fatalf("self-test: delete a row: %v", err)
	}
	report, err := CheckLargeJobs(ctx, sys.DB, jobs[:2])
	if err != nil {
		t.Fatalf("self-test: large-job checker: %v", err)
	}
	if n := report.Violations[InvLargeRowsExact]; n != 2 {
		t.Errorf("self-test: %d violations of %q, want 2 (a doubled row, a missing row)", n, InvLargeRowsExact)
	}
	if n := report.Violations[InvLargeAllVisible]; n != 2 {
		t.Errorf("self-test: %d violations of %q, want 2", n, InvLargeAllVisible)
	}
	reader := &VisibilityReader{DB: sys.DB, Jobs: jobs}
	reader.poll(ctx)
	if _, _, _, vis := reader.Result(); vis.Violations[InvLargeNeverPartial] != 2 {
		t.Errorf("self-test: the visibility reader found %d partly visible jobs, want 2", vis.Violations[InvLargeNeverPartial])
	}
	t.Logf("self-test: a doubled and a missing row are found by the checker and the visibility reader")
}

// cancelMidLoad cancels job j once it committed two chunks, waits for it
// to be CANCELLED and for its rows to be removed (by the worker whose claim
// the cancellation ended, chunked.Purge), and says what happened. A
// cancellation that finds no live claim (its worker's lease lapsed on a
// stalled machine) leaves the rows to a later clean-up: that is reported,
// not failed; what must hold is that none is ever visible (the reader and
// the checker prove it). A job that was not cancelled fails the checker.
func cancelMidLoad(ctx context.Context, sys *System, cl *client.Client, j *LargeJob) string {
	var chunks int
	if err := waitFor(ctx, largeWithin, 20*time.Millisecond, "the job to cancel loading its second chunk", func() bool {
		st, err := largeLoadState(ctx, sys, j.JobID)
		chunks = st.chunks
		return err == nil && st.status == "RUNNING" && st.chunks >= 2
	}); err != nil {
		return "cancel " + j.Tag + ": " + err.Error()
	}
	if _, err := cl.Cancel(ctx, j.JobID, "faultinject-cancel-"+j.Tag); err != nil {
		return "cancel " + j.Tag + ": " + err.Error()
	}
	if err := waitFor(ctx, largeWithin, 50*time.Millisecond, "the cancelled job CANCELLED", func() bool {
		st, err := largeLoadState(ctx, sys, j.JobID)
		return err == nil && st.status == "CANCELLED"
	}); err != nil {
		return "cancel " + j.Tag + ": " + err.Error()
	}
	removed := waitFor(ctx, largePurgeWithin, 50*time.Millisecond, "the cancelled job's rows removed", func() bool {
		n, err := largeRows(ctx, sys, j.JobID)
		return err == nil && n == 0
	}) == nil
	left, _ := largeRows(ctx, sys, j.JobID)
	return fmt.Sprintf("cancelled %s after %d chunks; rows removed within %s: %t (%d left, hidden)", j.Tag, chunks, largePurgeWithin, removed, left)
}

// largeClient is a client of the intake as the first HTTP principal.
func largeClient(t *testing.T, sys *System) *client.Client {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sys.HTTP[0].Authorization, "Basic "))
	if err != nil {
		t.Fatalf("principal credentials: %v", err)
	}
	user, password, _ := strings.Cut(string(raw), ":")
	cl, err := client.New(sys.IntakeURL, client.WithBasicAuth(user, password))
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	return cl
}

// largeState is a large job's row and load as the database has them.
type largeState struct {
	status, owner            string
	attempts, chunks, loaded int
}

func largeLoadState(ctx context.Context, sys *System, jobID string) (largeState, error) {
	var st largeState
	err := sys.DB.QueryRow(ctx, `SELECT j.job_status, coalesce(j.lease_owner_id, ''), j.attempt_count,
			coalesce(l.chunks_done, 0), coalesce(l.records_loaded, 0)
		FROM etl_job_records j LEFT JOIN etl_chunked_loads l ON l.job_record_id = j.job_record_id
		WHERE j.job_record_id = $1::uuid`, jobID).Scan(&st.status, &st.owner, &st.attempts, &st.chunks, &st.loaded)
	return st, err
}

// largeRows counts the job's processed_data rows, visible or not.
func largeRows(ctx context.Context, sys *System, jobID string) (int, error) {
	var n int
	err := sys.DB.QueryRow(ctx, `SELECT count(*) FROM processed_data WHERE job_record_id = $1::uuid`, jobID).Scan(&n)
	return n, err
}
