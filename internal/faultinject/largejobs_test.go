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
)

// TestLargeJobsUnderWorkerKills runs the real binaries with 1,000-record
// chunks and loads three large JSON Lines jobs (30,000-40,000 records,
// uploaded over HTTP in 256 KiB parts) and a fourth of 50,000 records that
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
		{Tag: "large-a", Records: 30_000},
		{Tag: "large-b", Records: 35_000},
		{Tag: "large-c", Records: 40_000},
		{Tag: "large-x", Records: 50_000, Cancel: true},
	}
	cl := largeClient(t, sys)

	reader := &VisibilityReader{DB: sys.DB, Jobs: jobs}
	readCtx, stopReading := context.WithCancel(ctx)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		reader.Run(readCtx, 50*time.Millisecond)
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

	// Cancel the fourth mid-load: once it committed two chunks and before
	// it is done (it needs 50).
	cancelled := jobs[3]
	var chunksAtCancel int
	testwait.For(t, largeWithin, "the job to cancel loading its second chunk", func() bool {
		st, err := largeLoadState(ctx, sys, cancelled.JobID)
		chunksAtCancel = st.chunks
		return err == nil && st.status == "RUNNING" && st.chunks >= 2
	})
	if _, err := cl.Cancel(ctx, cancelled.JobID, "faultinject-cancel-"+cancelled.Tag); err != nil {
		t.Fatalf("cancel %s: %v", cancelled.Tag, err)
	}
	testwait.For(t, largeWithin, "the cancelled job CANCELLED and its rows removed", func() bool {
		st, err := largeLoadState(ctx, sys, cancelled.JobID)
		return err == nil && st.status == "CANCELLED" && st.rows == 0
	})
	t.Logf("cancelled %s after %d chunks; its rows removed", cancelled.Tag, chunksAtCancel)

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
					st.chunks >= 2 && st.loaded <= j.Records-3*largeChunkRecords:
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
	for _, line := range killLog {
		t.Log(line)
	}
	if len(killLog) == 0 {
		t.Errorf("no worker was SIGKILLed while holding a large job mid-load")
	}
	stopReading()
	<-readDone

	report, err := CheckLargeJobs(ctx, sys.DB, jobs)
	if err != nil {
		t.Fatalf("large-job checker: %v", err)
	}
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
	}
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
	status, owner          string
	attempts, chunks, rows int
	loaded                 int
}

func largeLoadState(ctx context.Context, sys *System, jobID string) (largeState, error) {
	var st largeState
	err := sys.DB.QueryRow(ctx, `SELECT j.job_status, coalesce(j.lease_owner_id, ''), j.attempt_count,
			coalesce(l.chunks_done, 0), coalesce(l.records_loaded, 0),
			(SELECT count(*) FROM processed_data d WHERE d.job_record_id = j.job_record_id)
		FROM etl_job_records j LEFT JOIN etl_chunked_loads l ON l.job_record_id = j.job_record_id
		WHERE j.job_record_id = $1::uuid`, jobID).Scan(&st.status, &st.owner, &st.attempts, &st.chunks, &st.loaded, &st.rows)
	return st, err
}
