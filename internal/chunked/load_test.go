package chunked_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/chunked"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testwait"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"))
}

// payload returns n records as JSON Lines or a JSON array; the records
// whose numbers are in bad are malformed (JSON Lines) or not objects
// (array).
func payload(format string, n int, bad ...int) string {
	var b strings.Builder
	if format == chunked.FormatJSONArray {
		b.WriteString("[")
	}
	for i := 1; i <= n; i++ {
		rec := fmt.Sprintf(`{"id":"r%d","name":"jane","amount":"12.345"}`, i)
		if slices.Contains(bad, i) {
			rec = `{"id":` // malformed
			if format == chunked.FormatJSONArray {
				rec = `17` // not an object
			}
		}
		if format == chunked.FormatJSONArray {
			if i > 1 {
				b.WriteString(",\n")
			}
			b.WriteString(rec)
		} else {
			b.WriteString(rec + "\n")
		}
	}
	if format == chunked.FormatJSONArray {
		b.WriteString("]\n")
	}
	return b.String()
}

// parts cuts s into n parts of about equal size (records span them).
func parts(s string, n int) [][]byte {
	var out [][]byte
	size := (len(s) + n - 1) / n
	for off := 0; off < len(s); off += size {
		out = append(out, []byte(s[off:min(off+size, len(s))]))
	}
	return out
}

func claimOne(t testing.TB, db pg.DBTX, owner string, d time.Duration) lease.Claim {
	t.Helper()
	res, err := lease.ClaimChunkedJobs(context.Background(), db, lease.ClaimParams{OwnerID: owner, Limit: 4, LeaseDuration: d})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Claimed) != 1 {
		t.Fatalf("claimed %d chunked jobs, want 1", len(res.Claimed))
	}
	return res.Claimed[0]
}

type loadRow struct {
	state                        string
	chunks, loaded, bad, nextRec int64
	failed                       *int64
	total                        *int64
	rows, visible, distinct      int64
}

func readLoad(t *testing.T, db pg.DBTX, job uuid.UUID) loadRow {
	t.Helper()
	var l loadRow
	err := db.QueryRow(context.Background(), `
SELECT l.load_state, l.chunks_done, l.records_loaded, l.bad_records, l.next_record_number, l.failed_record_number,
       l.records_total,
       (SELECT count(*) FROM processed_data d WHERE d.job_record_id = $1),
       (SELECT count(*) FROM processed_data_visible d WHERE d.job_record_id = $1),
       (SELECT count(DISTINCT d.data) FROM processed_data d WHERE d.job_record_id = $1)
FROM etl_chunked_loads l WHERE l.job_record_id = $1`, job).Scan(&l.state, &l.chunks, &l.loaded, &l.bad, &l.nextRec,
		&l.failed, &l.total, &l.rows, &l.visible, &l.distinct)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func jobStatus(t *testing.T, db pg.DBTX, job uuid.UUID) (status, code string) {
	t.Helper()
	var c *string
	if err := db.QueryRow(context.Background(), `SELECT job_status, failure_code FROM etl_job_records WHERE job_record_id = $1`, job).Scan(&status, &c); err != nil {
		t.Fatal(err)
	}
	if c != nil {
		code = *c
	}
	return status, code
}

func newLoader(db *pgxpool.Pool, records int) *chunked.Loader {
	return chunked.NewLoader(db, chunked.Config{ChunkRecords: records, ChunkBytes: 1 << 20})
}

func TestLoadsEveryRecordOnceAcrossPartsAndChunks(t *testing.T) {
	db, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	for _, format := range []string{chunked.FormatJSONL, chunked.FormatJSONArray} {
		t.Run(format, func(t *testing.T) {
			const n = 25
			job, _ := pgtest.InsertChunkedUpload(t, db, pgtest.ChunkedUpload{
				Parts: parts(payload(format, n), 4), ChunkSize: 7, Format: format})
			c := claimOne(t, db, "worker-a-0001", time.Minute)
			if err := newLoader(db, 4).Load(ctx, c.Ref); err != nil {
				t.Fatal(err)
			}
			if l := readLoad(t, db, job); l.state != "LOADING" || l.rows != n || l.visible != 0 || l.chunks != 7 || l.loaded != n {
				t.Fatalf("before success: %+v", l)
			}
			if err := lease.SucceedChunked(ctx, db, c.Ref); err != nil {
				t.Fatal(err)
			}
			l := readLoad(t, db, job)
			if l.state != "VISIBLE" || l.rows != n || l.visible != n || l.distinct != n || l.total == nil || *l.total != n {
				t.Fatalf("after success: %+v", l)
			}
			if st, _ := jobStatus(t, db, job); st != pg.StatusSucceeded {
				t.Fatalf("job %s", st)
			}
			var queued int
			if err := db.QueryRow(ctx, `SELECT count(*) FROM etl_chunked_job_queue WHERE job_record_id = $1`, job).Scan(&queued); err != nil || queued != 0 {
				t.Fatalf("queue rows %d (%v), want 0", queued, err)
			}
			var events int
			if err := db.QueryRow(ctx, `SELECT count(*) FROM etl_outbox_events WHERE job_record_id = $1 AND event_kind = 'job_lifecycle' AND job_status = 'SUCCEEDED'`, job).Scan(&events); err != nil || events != 1 {
				t.Fatalf("lifecycle events %d (%v), want 1", events, err)
			}
			// The upload's chunks go once the job is terminal; the rows stay.
			res, err := chunked.Purge(ctx, db, job, 10, 3)
			if err != nil || res.Rows != 0 || res.Chunks == 0 {
				t.Fatalf("purge after success: %+v %v", res, err)
			}
			if l := readLoad(t, db, job); l.visible != n {
				t.Fatalf("purge removed visible rows: %+v", l)
			}
		})
	}
}

// A worker whose lease was taken over between two chunks writes nothing
// more; the new claimant resumes after the last committed chunk and loads
// each record exactly once.
func TestStaleWorkerBetweenChunksWritesNothing(t *testing.T) {
	db, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	const n = 20
	job, _ := pgtest.InsertChunkedUpload(t, db, pgtest.ChunkedUpload{Parts: parts(payload(chunked.FormatJSONL, n), 3), ChunkSize: 11})
	a := claimOne(t, db, "worker-a-0001", time.Minute)
	var b lease.Claim
	stale := newLoader(db, 3)
	stale.Hooks.AfterChunkCommit = func(chunk int64) {
		if chunk == 2 {
			// The lease runs out and another worker claims the job.
			pgtest.ExpireChunkedLease(t, db, job, time.Millisecond)
			b = claimOne(t, db, "worker-b-0001", time.Minute)
		}
	}
	err := stale.Load(ctx, a.Ref)
	if !errors.Is(err, lease.ErrLost) {
		t.Fatalf("stale load: %v, want lease.ErrLost", err)
	}
	if l := readLoad(t, db, job); l.rows != 6 || l.chunks != 2 || l.nextRec != 7 {
		t.Fatalf("after the stale worker: %+v, want 2 chunks of 3", l)
	}
	if err := lease.SucceedChunked(ctx, db, a.Ref); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("stale success: %v, want lease.ErrLost", err)
	}
	if b.Attempt != 2 || b.FencingToken <= a.FencingToken {
		t.Fatalf("new claim attempt %d token %d (old %d)", b.Attempt, b.FencingToken, a.FencingToken)
	}
	if err := newLoader(db, 3).Load(ctx, b.Ref); err != nil {
		t.Fatal(err)
	}
	if err := lease.SucceedChunked(ctx, db, b.Ref); err != nil {
		t.Fatal(err)
	}
	if l := readLoad(t, db, job); l.rows != n || l.distinct != n || l.visible != n || l.loaded != n {
		t.Fatalf("after the new claimant: %+v", l)
	}
}

// A lease that runs out while a chunk transaction is open (the chunk waits
// at a hook until the database clock passes the expiry) commits nothing of
// that chunk; meanwhile no other worker can claim the job (its row is
// locked); afterwards the next claimant resumes at the last commit.
func TestLeaseLostInsideAChunkTransactionCommitsNothing(t *testing.T) {
	db, url := pgtest.NewDatabase(t)
	other := pgtest.NewPool(t, url, 2)
	ctx := context.Background()
	const n = 12
	job, _ := pgtest.InsertChunkedUpload(t, db, pgtest.ChunkedUpload{Parts: parts(payload(chunked.FormatJSONL, n), 2)})
	a := claimOne(t, db, "worker-a-0001", time.Minute)
	stale := newLoader(db, 5)
	stale.Hooks.AfterChunkCommit = func(chunk int64) {
		if chunk == 1 {
			// The lease now ends 2 s from the database clock (no renewer
			// runs here), well after chunk 2's fenced statement.
			if _, err := other.Exec(ctx, `UPDATE etl_job_records SET lease_expires_at = clock_timestamp() + interval '2 seconds'
WHERE job_record_id = $1`, job); err != nil {
				t.Error(err)
			}
		}
	}
	claimedMeanwhile, reached := -1, false
	stale.Hooks.InChunkTx = func(_ context.Context, chunk int64) {
		if chunk != 2 {
			return
		}
		reached = true
		testwait.For(t, 30*time.Second, "the lease to expire by the database clock", func() bool {
			var expired bool
			err := other.QueryRow(ctx, `SELECT lease_expires_at < clock_timestamp() FROM etl_job_records WHERE job_record_id = $1`, job).Scan(&expired)
			return err == nil && expired
		})
		res, err := lease.ClaimChunkedJobs(ctx, other, lease.ClaimParams{OwnerID: "worker-b-0001", Limit: 1, LeaseDuration: time.Minute})
		if err != nil {
			t.Error(err)
		}
		claimedMeanwhile = len(res.Claimed)
	}
	err := stale.Load(ctx, a.Ref)
	if !errors.Is(err, lease.ErrLost) {
		t.Fatalf("load: %v, want lease.ErrLost", err)
	}
	if !reached {
		t.Fatal("chunk 2's transaction never reached its hook")
	}
	if claimedMeanwhile != 0 {
		t.Fatal("a claim took the job while its chunk transaction held the row")
	}
	l := readLoad(t, db, job)
	if l.chunks != 1 || l.rows != 5 || l.nextRec != 6 {
		t.Fatalf("after the expired chunk: %+v, want only chunk 1", l)
	}
	b := claimOne(t, db, "worker-b-0001", time.Minute)
	if err := newLoader(db, 5).Load(ctx, b.Ref); err != nil {
		t.Fatal(err)
	}
	if err := lease.SucceedChunked(ctx, db, b.Ref); err != nil {
		t.Fatal(err)
	}
	if l := readLoad(t, db, job); l.rows != n || l.distinct != n || l.visible != n {
		t.Fatalf("after resume: %+v", l)
	}
}

// A reader polling processed_data_visible during a load sees none of the
// job's rows, then all of them: never a part.
func TestReadersNeverSeeAPartialLoad(t *testing.T) {
	db, url := pgtest.NewDatabase(t)
	reader := pgtest.NewPool(t, url, 1)
	ctx := context.Background()
	const n = 60
	job, _ := pgtest.InsertChunkedUpload(t, db, pgtest.ChunkedUpload{Parts: parts(payload(chunked.FormatJSONL, n), 5), ChunkSize: 64})
	c := claimOne(t, db, "worker-a-0001", time.Minute)
	ld := newLoader(db, 4)
	var mu sync.Mutex
	seen := map[int64]int{}
	poll := func() {
		var k int64
		if err := reader.QueryRow(ctx, `SELECT count(*) FROM processed_data_visible WHERE job_record_id = $1`, job).Scan(&k); err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		seen[k]++
		mu.Unlock()
	}
	ld.Hooks.AfterChunkCommit = func(int64) { poll() }
	ld.Hooks.InChunkTx = func(context.Context, int64) { poll() }
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				poll()
			}
		}
	}()
	err := ld.Load(ctx, c.Ref)
	if err == nil {
		err = lease.SucceedChunked(ctx, db, c.Ref)
	}
	poll()
	close(stop)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for k := range seen {
		if k != 0 && k != n {
			t.Fatalf("a reader saw %d of %d rows (counts seen: %v)", k, n, seen)
		}
	}
	if seen[0] == 0 || seen[n] == 0 {
		t.Fatalf("counts seen %v: want both 0 and %d", seen, n)
	}
}

func TestBadRecords(t *testing.T) {
	db, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	for _, format := range []string{chunked.FormatJSONL, chunked.FormatJSONArray} {
		for _, tc := range []struct {
			maxBad int64
			bad    []int
			failAt int64 // 0: succeeds
		}{
			{0, nil, 0},
			{0, []int{7}, 7},
			{2, []int{3, 9}, 0},      // exactly max passes
			{2, []int{3, 9, 10}, 10}, // max+1 fails at the extra one
			{1, []int{1, 2}, 2},
		} {
			t.Run(fmt.Sprintf("%s/max%d/bad%v", format, tc.maxBad, tc.bad), func(t *testing.T) {
				const n = 12
				job, _ := pgtest.InsertChunkedUpload(t, db, pgtest.ChunkedUpload{
					Parts: parts(payload(format, n, tc.bad...), 3), ChunkSize: 5, Format: format, MaxBadRecords: tc.maxBad})
				c := claimOne(t, db, "worker-a-0001", time.Minute)
				err := newLoader(db, 4).Load(ctx, c.Ref)
				if tc.failAt == 0 {
					if err != nil {
						t.Fatal(err)
					}
					if err := lease.SucceedChunked(ctx, db, c.Ref); err != nil {
						t.Fatal(err)
					}
					l := readLoad(t, db, job)
					if l.visible != int64(n-len(tc.bad)) || l.bad != int64(len(tc.bad)) {
						t.Fatalf("%+v", l)
					}
					rows, err := db.Query(ctx, `SELECT record_number FROM etl_chunked_load_bad_records WHERE job_record_id = $1 AND error_code IN ('etl_invalid_record', 'etl_invalid_json') ORDER BY 1`, job)
					if err != nil {
						t.Fatal(err)
					}
					nums, err := pgx.CollectRows(rows, pgx.RowTo[int64])
					if err != nil {
						t.Fatal(err)
					}
					if fmt.Sprint(nums) != fmt.Sprint(tc.bad) && !(len(nums) == 0 && len(tc.bad) == 0) {
						t.Fatalf("bad records listed %v, want %v", nums, tc.bad)
					}
					return
				}
				var re *chunked.RecordError
				if !errors.As(err, &re) || re.Number != tc.failAt || re.Code != codes.InvalidRecord {
					t.Fatalf("load: %v, want a record error at %d", err, tc.failAt)
				}
				if err := lease.FailChunked(ctx, db, c.Ref, re.Code, re.Number); err != nil {
					t.Fatal(err)
				}
				if _, err := chunked.Purge(ctx, db, job, 2, 2); err != nil {
					t.Fatal(err)
				}
				l := readLoad(t, db, job)
				if l.state != "DISCARDED" || l.failed == nil || *l.failed != tc.failAt || l.rows != 0 || l.visible != 0 {
					t.Fatalf("after the failure: %+v", l)
				}
				if st, code := jobStatus(t, db, job); st != pg.StatusFailed || code != codes.InvalidRecord {
					t.Fatalf("job %s %s", st, code)
				}
			})
		}
	}
}

// A record longer than the chunk byte bound is a bad record.
func TestRecordLongerThanTheBoundFails(t *testing.T) {
	db, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	long := fmt.Sprintf(`{"id":"x","pad":"%s"}`, strings.Repeat("p", 4000))
	body := `{"id":"a"}` + "\n" + long + "\n" + `{"id":"b"}` + "\n"
	job, _ := pgtest.InsertChunkedUpload(t, db, pgtest.ChunkedUpload{Parts: parts(body, 2), ChunkSize: 1000})
	c := claimOne(t, db, "worker-a-0001", time.Minute)
	err := chunked.NewLoader(db, chunked.Config{ChunkRecords: 10, ChunkBytes: 1024}).Load(ctx, c.Ref)
	var re *chunked.RecordError
	if !errors.As(err, &re) || re.Number != 2 {
		t.Fatalf("load: %v, want a record error at 2", err)
	}
	if l := readLoad(t, db, job); l.rows != 0 {
		t.Fatalf("%+v", l)
	}
}

// A cancellation between chunks stops the load at the next chunk (its fence
// finds the job CANCELLED), and the purge removes what was staged: nothing
// of the job is ever visible.
func TestCancelMidLoadLeavesNothing(t *testing.T) {
	db, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	const n = 15
	job, _ := pgtest.InsertChunkedUpload(t, db, pgtest.ChunkedUpload{Parts: parts(payload(chunked.FormatJSONL, n), 2)})
	c := claimOne(t, db, "worker-a-0001", time.Minute)
	ld := newLoader(db, 4)
	ld.Hooks.AfterChunkCommit = func(chunk int64) {
		if chunk == 2 {
			out, err := pg.CancelJob(ctx, db, pg.CancelParams{PrincipalScopeHash: pgtest.SHA(pgtest.DefaultFixtureOwner),
				JobID: job, CancellationKeyHash: pgtest.SHA("cancel")})
			if err != nil || !out.Cancelled {
				t.Errorf("cancel: %+v %v", out, err)
			}
		}
	}
	if err := ld.Load(ctx, c.Ref); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("load: %v, want lease.ErrLost", err)
	}
	if l := readLoad(t, db, job); l.rows != 8 || l.visible != 0 {
		t.Fatalf("before the purge: %+v", l)
	}
	res, err := chunked.Purge(ctx, db, job, 3, 1)
	if err != nil || res.Rows != 8 || res.Chunks == 0 {
		t.Fatalf("purge: %+v %v", res, err)
	}
	if l := readLoad(t, db, job); l.state != "DISCARDED" || l.rows != 0 || l.visible != 0 {
		t.Fatalf("after the purge: %+v", l)
	}
	// A chunked job's queue row of a cancelled job goes with the next claim.
	if res, err := lease.ClaimChunkedJobs(ctx, db, lease.ClaimParams{OwnerID: "worker-b-0001", Limit: 1, LeaseDuration: time.Minute}); err != nil || len(res.Claimed) != 0 {
		t.Fatalf("claim after cancel: %+v %v", res, err)
	}
	var queued int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM etl_chunked_job_queue`).Scan(&queued); err != nil || queued != 0 {
		t.Fatalf("queue rows %d (%v)", queued, err)
	}
}

// An expired lease on the last attempt fails the job
// etl_worker_attempts_exhausted, discards its load and dequeues it.
func TestExhaustedChunkedJob(t *testing.T) {
	db, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	job, _ := pgtest.InsertChunkedUpload(t, db, pgtest.ChunkedUpload{Parts: parts(payload(chunked.FormatJSONL, 3), 1), MaxAttempts: 1})
	claimOne(t, db, "worker-a-0001", time.Minute)
	pgtest.ExpireChunkedLease(t, db, job, time.Millisecond)
	res, err := lease.ClaimChunkedJobs(ctx, db, lease.ClaimParams{OwnerID: "worker-b-0001", Limit: 1, LeaseDuration: time.Minute})
	if err != nil || res.Exhausted != 1 || len(res.Claimed) != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	if st, code := jobStatus(t, db, job); st != pg.StatusFailed || code != codes.WorkerAttemptsExhausted {
		t.Fatalf("job %s %s", st, code)
	}
	if l := readLoad(t, db, job); l.state != "DISCARDED" {
		t.Fatalf("%+v", l)
	}
}

// The next chunk is read while the previous one commits; an error found
// there (a broken JSON array at record 10, in chunk 3 of 4-record chunks)
// still ends the load only after the chunks before it committed, as a load
// reading chunk by chunk would: chunks 1 and 2 are committed, nothing of
// chunk 3 is, and the record error names record 10.
func TestReadAheadErrorEndsAfterTheChunksBeforeIt(t *testing.T) {
	db, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	var b strings.Builder
	b.WriteString("[")
	for i := 1; i <= 12; i++ {
		if i > 1 {
			b.WriteString(",")
		}
		if i == 10 {
			b.WriteString("}") // breaks the array's structure
		}
		fmt.Fprintf(&b, `{"id":"r%d"}`, i)
	}
	b.WriteString("]")
	job, _ := pgtest.InsertChunkedUpload(t, db, pgtest.ChunkedUpload{Parts: parts(b.String(), 3), ChunkSize: 9,
		Format: chunked.FormatJSONArray})
	c := claimOne(t, db, "worker-a-0001", time.Minute)
	ld := newLoader(db, 4)
	var committed []int64
	ld.Hooks.AfterChunkCommit = func(chunk int64) { committed = append(committed, chunk) }
	err := ld.Load(ctx, c.Ref)
	var re *chunked.RecordError
	if !errors.As(err, &re) || re.Number != 10 || re.Code != codes.InvalidRecord {
		t.Fatalf("load: %v, want a record error at 10", err)
	}
	if fmt.Sprint(committed) != "[1 2]" {
		t.Fatalf("chunks committed %v, want [1 2]", committed)
	}
	if l := readLoad(t, db, job); l.chunks != 2 || l.rows != 8 || l.loaded != 8 || l.nextRec != 9 {
		t.Fatalf("after the error: %+v, want chunks 1 and 2 only", l)
	}
}

// The job row is locked only from a chunk's fence to its commit, not while
// its rows are copied: a renewal during the copy renews the lease, one
// after the fence finds the row busy (neither renewed nor lost). Chunks that
// follow each other without a gap (the next one is read meanwhile) so leave
// renewal a chance at every chunk instead of starving it until the lease
// runs out.
func TestRenewalDuringAChunkCopyIsNotStarved(t *testing.T) {
	db, url := pgtest.NewDatabase(t)
	other := pgtest.NewPool(t, url, 2)
	ctx := context.Background()
	const n = 12
	job, _ := pgtest.InsertChunkedUpload(t, db, pgtest.ChunkedUpload{Parts: parts(payload(chunked.FormatJSONL, n), 2)})
	c := claimOne(t, db, "worker-a-0001", time.Minute)
	renew := func() lease.Renewal {
		res, err := lease.Renew(ctx, other, c.OwnerID, []lease.Ref{c.Ref}, 2*time.Minute)
		if err != nil {
			t.Error(err)
			return lease.Renewal{}
		}
		return res[0]
	}
	ld := newLoader(db, 4)
	var during, locked []lease.Renewal
	ld.Hooks.BeforeFence = func(context.Context, pgx.Tx, int64) { during = append(during, renew()) }
	ld.Hooks.InChunkTx = func(context.Context, int64) { locked = append(locked, renew()) }
	if err := ld.Load(ctx, c.Ref); err != nil {
		t.Fatal(err)
	}
	if len(during) != 3 || len(locked) != 3 {
		t.Fatalf("hooks ran %d and %d times, want 3 each", len(during), len(locked))
	}
	for i := range during {
		if !during[i].Renewed || during[i].Busy {
			t.Fatalf("chunk %d: renewal during the copy %+v, want renewed", i+1, during[i])
		}
		if locked[i].Renewed || !locked[i].Busy {
			t.Fatalf("chunk %d: renewal after the fence %+v, want busy", i+1, locked[i])
		}
	}
	if err := lease.SucceedChunked(ctx, db, c.Ref); err != nil {
		t.Fatal(err)
	}
	if l := readLoad(t, db, job); l.visible != n || l.distinct != n {
		t.Fatalf("%+v", l)
	}
}

// What happens to the job while a chunk copies its rows (the row not yet
// locked) decides that chunk at its fence: a claim that took the expired
// lease, or a cancellation, committed meanwhile; the chunk then commits
// nothing, and a new claimant resumes after the last committed chunk.
func TestClaimOrCancelDuringAChunkCopyCommitsNothingOfIt(t *testing.T) {
	for _, what := range []string{"claim", "cancel"} {
		t.Run(what, func(t *testing.T) {
			db, url := pgtest.NewDatabase(t)
			other := pgtest.NewPool(t, url, 2)
			ctx := context.Background()
			const n = 12
			job, _ := pgtest.InsertChunkedUpload(t, db, pgtest.ChunkedUpload{Parts: parts(payload(chunked.FormatJSONL, n), 2)})
			a := claimOne(t, db, "worker-a-0001", time.Minute)
			ld := newLoader(db, 5)
			var b lease.Claim
			ld.Hooks.BeforeFence = func(_ context.Context, _ pgx.Tx, chunk int64) {
				if chunk != 2 {
					return
				}
				if what == "cancel" {
					out, err := pg.CancelJob(ctx, other, pg.CancelParams{PrincipalScopeHash: pgtest.SHA(pgtest.DefaultFixtureOwner),
						JobID: job, CancellationKeyHash: pgtest.SHA("cancel")})
					if err != nil || !out.Cancelled {
						t.Errorf("cancel during the copy: %+v %v", out, err)
					}
					return
				}
				pgtest.ExpireChunkedLease(t, other, job, time.Millisecond)
				b = claimOne(t, other, "worker-b-0001", time.Minute)
			}
			if err := ld.Load(ctx, a.Ref); !errors.Is(err, lease.ErrLost) {
				t.Fatalf("load: %v, want lease.ErrLost", err)
			}
			if l := readLoad(t, db, job); l.chunks != 1 || l.rows != 5 || l.nextRec != 6 {
				t.Fatalf("after the lost chunk: %+v, want only chunk 1", l)
			}
			if what == "cancel" {
				if st, _ := jobStatus(t, db, job); st != pg.StatusCancelled {
					t.Fatalf("job %s", st)
				}
				return
			}
			if err := newLoader(db, 5).Load(ctx, b.Ref); err != nil {
				t.Fatal(err)
			}
			if err := lease.SucceedChunked(ctx, db, b.Ref); err != nil {
				t.Fatal(err)
			}
			if l := readLoad(t, db, job); l.rows != n || l.distinct != n || l.visible != n {
				t.Fatalf("after resume: %+v", l)
			}
		})
	}
}

// With one, two or three chunk transactions open at once, the chunks
// commit in payload order, each once, from the checkpoint before it.
func TestConnectionsCommitInOrder(t *testing.T) {
	db, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	for _, conns := range []int{1, 2, 3} {
		t.Run(fmt.Sprint(conns), func(t *testing.T) {
			const n = 25
			job, _ := pgtest.InsertChunkedUpload(t, db, pgtest.ChunkedUpload{Parts: parts(payload(chunked.FormatJSONL, n), 4), ChunkSize: 7})
			c := claimOne(t, db, "worker-a-0001", time.Minute)
			ld := chunked.NewLoader(db, chunked.Config{ChunkRecords: 3, ChunkBytes: 1 << 20, Connections: conns})
			var order []int64
			ld.Hooks.AfterChunkCommit = func(chunk int64) { order = append(order, chunk) }
			if err := ld.Load(ctx, c.Ref); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(order) != "[1 2 3 4 5 6 7 8 9]" {
				t.Fatalf("chunks committed in the order %v", order)
			}
			if err := lease.SucceedChunked(ctx, db, c.Ref); err != nil {
				t.Fatal(err)
			}
			if l := readLoad(t, db, job); l.chunks != 9 || l.loaded != n || l.visible != n || l.distinct != n {
				t.Fatalf("%+v", l)
			}
		})
	}
}

// A chunk whose transaction fails transiently (its connection is
// terminated just before its fence) while the next chunk's transaction is
// open: both roll back, the failed chunk is tried again alone, the next one
// is opened again after it, and every record is loaded once.
func TestTransientChunkFailureWithTheNextChunkOpen(t *testing.T) {
	db, url := pgtest.NewDatabase(t)
	other := pgtest.NewPool(t, url, 2)
	ctx := context.Background()
	const n = 12
	job, _ := pgtest.InsertChunkedUpload(t, db, pgtest.ChunkedUpload{Parts: parts(payload(chunked.FormatJSONL, n), 2)})
	c := claimOne(t, db, "worker-a-0001", time.Minute)
	ld := chunked.NewLoader(db, chunked.Config{ChunkRecords: 4, ChunkBytes: 1 << 20, Connections: 2})
	var mu sync.Mutex
	outcomes := map[string]int{}
	ld.OnChunk = func(outcome string, _ int64) {
		mu.Lock()
		outcomes[outcome]++
		mu.Unlock()
	}
	tries := 0
	ld.Hooks.BeforeFence = func(ctx context.Context, tx pgx.Tx, chunk int64) {
		if chunk != 2 {
			return
		}
		tries++
		if tries > 1 {
			return
		}
		var pid int
		if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Error(err)
			return
		}
		testwait.For(t, 30*time.Second, "chunk 3's transaction to be open beside chunk 2's", func() bool {
			var open int
			err := other.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND xact_start IS NOT NULL AND pid NOT IN (pg_backend_pid(), $1)`, pid).Scan(&open)
			return err == nil && open == 1
		})
		var killed bool
		if err := other.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&killed); err != nil || !killed {
			t.Errorf("terminate chunk 2's backend: %v %v", killed, err)
		}
	}
	if err := ld.Load(ctx, c.Ref); err != nil {
		t.Fatal(err)
	}
	if tries != 2 {
		t.Fatalf("chunk 2 reached its fence %d times, want 2", tries)
	}
	if outcomes[metrics.ChunkCommitted] != 3 || outcomes[metrics.ChunkFailed] != 1 || outcomes[metrics.ChunkStale] != 0 {
		t.Fatalf("chunk outcomes %v", outcomes)
	}
	if err := lease.SucceedChunked(ctx, db, c.Ref); err != nil {
		t.Fatal(err)
	}
	if l := readLoad(t, db, job); l.chunks != 3 || l.loaded != n || l.visible != n || l.distinct != n || l.rows != n {
		t.Fatalf("%+v", l)
	}
}
