package worker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/worker"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// chunkedHarness is a worker whose test signals are its chunked roles'.
type chunkedHarness struct {
	*harness
	purged <-chan uuid.UUID
}

func newChunkedWorker(t *testing.T, url, owner string, slots int, hooks worker.ChunkedTestHooks) *chunkedHarness {
	t.Helper()
	return newChunkedWorkerWith(t, url, owner, func(c *worker.Config) { c.ChunkedSlots = slots }, hooks)
}

// newChunkedWorkerWith is newChunkedWorker with the configuration adjusted
// by adjust.
func newChunkedWorkerWith(t *testing.T, url, owner string, adjust func(*worker.Config), hooks worker.ChunkedTestHooks) *chunkedHarness {
	t.Helper()
	cfg := fastConfig()
	cfg.OwnerID = owner
	cfg.ChunkRecords = 4
	// Renewal every 100 ms of a 10 s lease: chunk transactions meet it,
	// and a loaded machine's stalls do not lose it.
	cfg.LeaseDuration, cfg.RenewInterval, cfg.SafetyMargin = 10*time.Second, 100*time.Millisecond, time.Second
	adjust(&cfg)
	exec := pgtest.NewPool(t, url, 8)
	renew := pgtest.NewPool(t, url, 2)
	reg := prometheus.NewRegistry()
	m := metrics.NewWorker(reg)
	w := worker.New(cfg, exec, renew, worker.DefaultHandlers(1000), m, nil)
	w.SetUpTest(worker.TestHooks{})
	sig, purged := w.SetUpChunkedTest(hooks)
	return &chunkedHarness{harness: &harness{w: w, m: m, reg: reg, exec: exec, sig: sig, seen: map[string]int{}}, purged: purged}
}

// jsonl returns n records as JSON Lines; the lines in bad are malformed.
func jsonl(n int, bad ...int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		rec := fmt.Sprintf(`{"id":"r%d","name":"jane","amount":"1.005"}`, i)
		for _, k := range bad {
			if k == i {
				rec = `{"id":`
			}
		}
		b.WriteString(rec + "\n")
	}
	return b.String()
}

// thirds cuts s into three parts (records span them).
func thirds(s string) [][]byte {
	a, b := len(s)/3, 2*len(s)/3
	return [][]byte{[]byte(s[:a]), []byte(s[a:b]), []byte(s[b:])}
}

// loadCounts reads the job's rows: all, visible, distinct, and its load's
// state, chunks and failed record number (0: none).
func loadCounts(t *testing.T, db *pgxpool.Pool, job uuid.UUID) (rows, visible, distinct int64, state string, chunks, failed int64) {
	t.Helper()
	var f *int64
	err := db.QueryRow(context.Background(), `
SELECT (SELECT count(*) FROM processed_data WHERE job_record_id = $1),
       (SELECT count(*) FROM processed_data_visible WHERE job_record_id = $1),
       (SELECT count(DISTINCT data) FROM processed_data WHERE job_record_id = $1),
       l.load_state, l.chunks_done, l.failed_record_number
FROM etl_chunked_loads l WHERE l.job_record_id = $1`, job).Scan(&rows, &visible, &distinct, &state, &chunks, &f)
	if err != nil {
		t.Fatal(err)
	}
	if f != nil {
		failed = *f
	}
	return
}

func storedChunks(t *testing.T, db *pgxpool.Pool, upload uuid.UUID) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM etl_upload_chunks WHERE upload_id = $1`, upload).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestChunkedJobLoadsInChunksAndBecomesVisibleAtSuccess(t *testing.T) {
	t.Parallel()
	db, url := pgtest.NewDatabase(t)
	const n = 23
	job, upload := pgtest.InsertChunkedUpload(t, db, pgtest.ChunkedUpload{Parts: thirds(jsonl(n)), ChunkSize: 50})
	h := newChunkedWorker(t, url, "chunked-worker-1", 2, worker.ChunkedTestHooks{})
	h.start(t)
	h.awaitOutcome(t, time.Minute, "the chunked job's success", metrics.OutcomeSucceeded, 1)
	wantJob(t, db, job, pg.StatusSucceeded, 1)
	if rows, visible, distinct, state, chunks, _ := loadCounts(t, db, job); rows != n || visible != n || distinct != n || state != "VISIBLE" || chunks != 6 {
		t.Fatalf("rows %d visible %d distinct %d state %s chunks %d", rows, visible, distinct, state, chunks)
	}
	if got := testutil.ToFloat64(h.m.RecordsLoaded); got != n {
		t.Fatalf("records loaded metric %v, want %d", got, n)
	}
	if got := testutil.ToFloat64(h.m.ChunkCommits.WithLabelValues(metrics.ChunkCommitted)); got != 6 {
		t.Fatalf("chunk commits %v, want 6", got)
	}
	if id := receive(t, time.Minute, "no clean-up after the success", h.purged); id != job || storedChunks(t, db, upload) != 0 {
		t.Fatalf("clean-up of %s left %d stored chunks", id, storedChunks(t, db, upload))
	}
}

// A worker that stops dead after its second chunk (its renewal keeps the
// lease no more: the lease is expired by the database clock, as after a
// SIGKILL) writes nothing more; a second worker claims the job, resumes at
// the committed checkpoint and loads every record exactly once.
func TestChunkedJobResumesOnAnotherWorkerAfterACrash(t *testing.T) {
	t.Parallel()
	db, url := pgtest.NewDatabase(t)
	const n = 30
	job, _ := pgtest.InsertChunkedUpload(t, db, pgtest.ChunkedUpload{Parts: thirds(jsonl(n)), ChunkSize: 64})
	frozen, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	unfreeze := func() { releaseOnce.Do(func() { close(release) }) }
	// One slot: while its handler is frozen, worker a claims nothing (it
	// cannot take the job back itself).
	a := newChunkedWorker(t, url, "chunked-worker-a", 1, worker.ChunkedTestHooks{AfterChunkCommit: func(chunk int64) {
		if chunk == 2 {
			close(frozen)
			<-release
		}
	}})
	a.start(t)
	t.Cleanup(unfreeze) // runs before a's Stop
	receive(t, time.Minute, "worker a never committed its second chunk", frozen)
	pgtest.ExpireChunkedLease(t, db, job, time.Millisecond)
	b := newChunkedWorker(t, url, "chunked-worker-b", 2, worker.ChunkedTestHooks{})
	b.start(t)
	b.awaitOutcome(t, time.Minute, "worker b's success", metrics.OutcomeSucceeded, 1)
	unfreeze()
	a.awaitOutcome(t, time.Minute, "worker a's stale end", metrics.OutcomeStale, 1)
	wantJob(t, db, job, pg.StatusSucceeded, 2)
	rows, visible, distinct, state, chunks, _ := loadCounts(t, db, job)
	if rows != n || visible != n || distinct != n || state != "VISIBLE" || chunks != 8 {
		t.Fatalf("rows %d visible %d distinct %d state %s chunks %d: want each of %d records once in 2+6 chunks", rows, visible, distinct, state, chunks, n)
	}
	if got := testutil.ToFloat64(b.m.RecordsLoaded); got != n-8 {
		t.Fatalf("worker b loaded %v records, want %d (it resumed after record 8)", got, n-8)
	}
}

// A cancellation while the job loads stops it at the next chunk (the
// revocation's renewal or the chunk's fenced statement finds the lease
// gone), and the staged rows are removed: nothing was ever visible.
func TestCancelledChunkedJobLeavesNothing(t *testing.T) {
	t.Parallel()
	db, url := pgtest.NewDatabase(t)
	const n = 30
	job, upload := pgtest.InsertChunkedUpload(t, db, pgtest.ChunkedUpload{Parts: thirds(jsonl(n))})
	var h *chunkedHarness
	h = newChunkedWorker(t, url, "chunked-worker-1", 2, worker.ChunkedTestHooks{AfterChunkCommit: func(chunk int64) {
		if chunk != 2 {
			return
		}
		out, err := pg.CancelJob(context.Background(), db, pg.CancelParams{PrincipalScopeHash: pgtest.SHA(pgtest.DefaultFixtureOwner),
			JobID: job, CancellationKeyHash: pgtest.SHA("cancel")})
		if err != nil || !out.Cancelled {
			t.Errorf("cancel: %+v %v", out, err)
		}
		h.w.Revoke(job)
	}})
	h.start(t)
	h.awaitOutcome(t, time.Minute, "the cancelled outcome", metrics.OutcomeCancelled, 1)
	receive(t, time.Minute, "no clean-up after the cancellation", h.purged)
	wantJob(t, db, job, pg.StatusCancelled, 1)
	if rows, visible, _, state, chunks, _ := loadCounts(t, db, job); rows != 0 || visible != 0 || state != "DISCARDED" || chunks != 2 {
		t.Fatalf("rows %d visible %d state %s chunks %d", rows, visible, state, chunks)
	}
	if storedChunks(t, db, upload) != 0 {
		t.Fatal("the cancelled job's payload is still stored")
	}
}

// An invalid record fails the job etl_invalid_record with its line number
// (maxBadRecords 0), and what earlier chunks staged is removed.
func TestInvalidRecordFailsTheChunkedJobWithItsNumber(t *testing.T) {
	t.Parallel()
	db, url := pgtest.NewDatabase(t)
	job, _ := pgtest.InsertChunkedUpload(t, db, pgtest.ChunkedUpload{Parts: thirds(jsonl(20, 11))})
	h := newChunkedWorker(t, url, "chunked-worker-1", 2, worker.ChunkedTestHooks{})
	h.start(t)
	h.awaitOutcome(t, time.Minute, "the failure", metrics.OutcomeFailed, 1)
	receive(t, time.Minute, "no clean-up after the failure", h.purged)
	if st, _, code := jobState(t, db, job); st != pg.StatusFailed || code == nil || *code != codes.InvalidRecord {
		t.Fatalf("job %s %v", st, code)
	}
	if rows, visible, _, state, chunks, failed := loadCounts(t, db, job); rows != 0 || visible != 0 || state != "DISCARDED" || failed != 11 || chunks != 2 {
		t.Fatalf("rows %d visible %d state %s chunks %d failed record %d", rows, visible, state, chunks, failed)
	}
}

// While a chunk transaction holds the job row, renewal skips it and reports
// the claim busy, never lost; the lease is renewed once the chunk commits
// and the job succeeds.
func TestRenewalDuringAChunkTransactionIsBusyNotLost(t *testing.T) {
	t.Parallel()
	db, url := pgtest.NewDatabase(t)
	const n = 12
	job, _ := pgtest.InsertChunkedUpload(t, db, pgtest.ChunkedUpload{Parts: thirds(jsonl(n))})
	var sig worker.TestSignals
	busy := false
	h := newChunkedWorker(t, url, "chunked-worker-1", 2, worker.ChunkedTestHooks{InChunkTx: func(ctx context.Context, chunk int64) {
		if chunk != 2 {
			return
		}
		// Wait, holding the row in this transaction, for a renewal round
		// (on the renewer's goroutine) to find the claim busy.
		select {
		case <-sig.RenewBusy:
			busy = true
		case <-ctx.Done():
		case <-time.After(time.Minute):
		}
	}})
	sig = h.sig
	h.start(t)
	h.awaitOutcome(t, time.Minute, "the success", metrics.OutcomeSucceeded, 1)
	if !busy {
		t.Fatal("renewal never found the claim busy while its chunk transaction held the row")
	}
	wantJob(t, db, job, pg.StatusSucceeded, 1)
	for _, reason := range []string{metrics.LostNotRenewed, metrics.LostMarginGone, metrics.LostFencedWrite} {
		if got := testutil.ToFloat64(h.m.ClaimsLost.WithLabelValues(reason)); got != 0 {
			t.Fatalf("claims lost (%s): %v", reason, got)
		}
	}
	if rows, visible, distinct, _, _, _ := loadCounts(t, db, job); rows != n || visible != n || distinct != n {
		t.Fatalf("rows %d visible %d distinct %d", rows, visible, distinct)
	}
}

// MIGHTYETL_MAX_JOB_DURATION applies to a chunked job: past it, the chunk
// transaction in flight is cancelled (nothing of it commits), the job fails
// etl_job_timeout and its staged rows are removed.
func TestChunkedJobPastItsMaximumDurationFails(t *testing.T) {
	t.Parallel()
	db, url := pgtest.NewDatabase(t)
	job, _ := pgtest.InsertChunkedUpload(t, db, pgtest.ChunkedUpload{Parts: thirds(jsonl(20))})
	reached := make(chan struct{})
	h := newChunkedWorkerWith(t, url, "chunked-worker-1", func(c *worker.Config) { c.MaxJobDuration = 2 * time.Second },
		worker.ChunkedTestHooks{InChunkTx: func(ctx context.Context, chunk int64) {
			if chunk == 2 {
				close(reached)
				<-ctx.Done() // held until the attempt times out
			}
		}})
	h.start(t)
	receive(t, time.Minute, "chunk 2 never started", reached)
	h.awaitOutcome(t, time.Minute, "the timeout's failure", metrics.OutcomeFailed, 1)
	receive(t, time.Minute, "no clean-up after the timeout", h.purged)
	if st, _, code := jobState(t, db, job); st != pg.StatusFailed || code == nil || *code != codes.JobTimeout {
		t.Fatalf("job %s %v", st, code)
	}
	if rows, visible, _, state, chunks, _ := loadCounts(t, db, job); rows != 0 || visible != 0 || state != "DISCARDED" || chunks != 1 {
		t.Fatalf("rows %d visible %d state %s chunks %d", rows, visible, state, chunks)
	}
}

// A worker stopping while a chunked job loads cancels the chunk in flight
// after its grace period (nothing of it commits) and releases the job; the
// next worker resumes at the committed checkpoint and loads each record
// once.
func TestShutdownReleasesAChunkedJobAtItsCheckpoint(t *testing.T) {
	t.Parallel()
	db, url := pgtest.NewDatabase(t)
	const n = 20
	job, _ := pgtest.InsertChunkedUpload(t, db, pgtest.ChunkedUpload{Parts: thirds(jsonl(n))})
	reached := make(chan struct{})
	var once sync.Once
	a := newChunkedWorkerWith(t, url, "chunked-worker-a", func(c *worker.Config) { c.ShutdownGrace = 100 * time.Millisecond },
		worker.ChunkedTestHooks{InChunkTx: func(ctx context.Context, chunk int64) {
			if chunk == 2 {
				once.Do(func() { close(reached) })
				<-ctx.Done() // held until the shutdown cancels the handler
			}
		}})
	a.start(t)
	receive(t, time.Minute, "chunk 2 never started", reached)
	if err := a.w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := a.outcome(metrics.OutcomeReleased); got != 1 {
		t.Fatalf("released %v, want 1", got)
	}
	wantJob(t, db, job, pg.StatusPending, 0)
	if rows, visible, _, state, chunks, _ := loadCounts(t, db, job); rows != 4 || visible != 0 || state != "LOADING" || chunks != 1 {
		t.Fatalf("after the release: rows %d visible %d state %s chunks %d", rows, visible, state, chunks)
	}
	b := newChunkedWorker(t, url, "chunked-worker-b", 2, worker.ChunkedTestHooks{})
	b.start(t)
	b.awaitOutcome(t, time.Minute, "the resumed success", metrics.OutcomeSucceeded, 1)
	if rows, visible, distinct, _, _, _ := loadCounts(t, db, job); rows != n || visible != n || distinct != n {
		t.Fatalf("rows %d visible %d distinct %d", rows, visible, distinct)
	}
}
