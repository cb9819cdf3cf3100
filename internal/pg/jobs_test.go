package pg_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// TestInsertJobsRetryWithSameIDs: a caller that retries InsertJobs after
// its insert committed (on a pool it does, even when the call then fails)
// passes the same JobIDs and gets its own jobs back as created; a job under
// the same key with another id is somebody else's. Nothing is inserted twice.
func TestInsertJobsRetryWithSameIDs(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	job := pg.NewJob{JobID: uuid.Must(uuid.NewV7()), Kind: pg.KindETLRecords, PrincipalScopeHash: repeatHex("a"),
		SubmissionKeyHash: repeatHex("b"), RequestDigest: repeatHex("d"), Payload: "[]", MaxAttempts: 3}
	for _, step := range []string{"first", "retry"} {
		ins, err := pg.InsertJobs(ctx, pool, []pg.NewJob{job})
		if err != nil {
			t.Fatal(err)
		}
		if !ins[0].Created || ins[0].JobID != job.JobID {
			t.Errorf("%s: created %v, same id %v", step, ins[0].Created, ins[0].JobID == job.JobID)
		}
	}
	other := job
	other.JobID = uuid.Nil
	ins, err := pg.InsertJobs(ctx, pool, []pg.NewJob{other})
	if err != nil || ins[0].Created || ins[0].JobID != job.JobID {
		t.Errorf("another caller: %+v %v", ins, err)
	}
	var jobs, events int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM etl_job_records`).Scan(&jobs); err != nil || jobs != 1 {
		t.Errorf("%d jobs (%v)", jobs, err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM etl_outbox_job_events WHERE event_kind = 'job_available'`).Scan(&events); err != nil || events != 1 {
		t.Errorf("%d job_available events (%v)", events, err)
	}
	pgtest.AssertClaimQueueConsistent(t, pool)
}

// TestInsertJobsStoresDigestsAsBytesAndRefusesMalformedHex: the identity
// digests arrive as 64 lowercase hex characters and are stored as their 32
// bytes (migration 00014); the read-back digest is the same hex. A digest in
// any other spelling (uppercase, short, long, not hex) is refused before the
// statement, so nothing of the batch is written.
func TestInsertJobsStoresDigestsAsBytesAndRefusesMalformedHex(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	good := pg.NewJob{Kind: pg.KindETLRecords, PrincipalScopeHash: pgtest.SHA("owner"),
		SubmissionKeyHash: pgtest.SHA("key"), RequestDigest: pgtest.SHA("[]"), Payload: "[]", MaxAttempts: 3}
	ins, err := pg.InsertJobs(ctx, pool, []pg.NewJob{good})
	if err != nil || !ins[0].Created || ins[0].RequestDigest != good.RequestDigest {
		t.Fatalf("insert: %+v %v", ins, err)
	}
	var scope, key, digest string
	var lengths int
	if err := pool.QueryRow(ctx, `SELECT encode(principal_scope_hash, 'hex'), encode(submission_key_hash, 'hex'),
		encode(request_digest, 'hex'), octet_length(principal_scope_hash) + octet_length(submission_key_hash) + octet_length(request_digest)
		FROM etl_job_records WHERE job_record_id = $1`, ins[0].JobID).Scan(&scope, &key, &digest, &lengths); err != nil {
		t.Fatal(err)
	}
	if scope != good.PrincipalScopeHash || key != good.SubmissionKeyHash || digest != good.RequestDigest || lengths != 96 {
		t.Errorf("stored %s %s %s, %d bytes", scope, key, digest, lengths)
	}
	for name, mutate := range map[string]func(*pg.NewJob){
		"uppercase scope": func(j *pg.NewJob) { j.PrincipalScopeHash = strings.ToUpper(j.PrincipalScopeHash) },
		"short key":       func(j *pg.NewJob) { j.SubmissionKeyHash = j.SubmissionKeyHash[:62] },
		"long digest":     func(j *pg.NewJob) { j.RequestDigest += "00" },
		"not hex key":     func(j *pg.NewJob) { j.SubmissionKeyHash = strings.Repeat("g", 64) },
	} {
		bad := good
		bad.SubmissionKeyHash = pgtest.SHA(name)
		mutate(&bad)
		fresh := good
		fresh.SubmissionKeyHash = pgtest.SHA(name + " fresh")
		if _, err := pg.InsertJobs(ctx, pool, []pg.NewJob{fresh, bad}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records`); n != 1 {
		t.Errorf("%d jobs after the refused batches, want 1", n)
	}
}

// TestInsertJobsPlainFirstFallsBackOnATakenKey pins the plain-INSERT-first
// path of InsertJobs: a batch of new keys outside a transaction goes in
// without touching the conflict cooldown; a batch with one taken key writes
// nothing with the plain INSERT, falls back to ON CONFLICT (the taken key
// comes back as the existing job, the new ones are created once), and the
// next inserts go straight to ON CONFLICT; inside a transaction a taken key
// never aborts the transaction. Not parallel: the cooldown is process-wide,
// and parallel tests of this package only start once this one has ended.
func TestInsertJobsPlainFirstFallsBackOnATakenKey(t *testing.T) {
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	job := func(key string) pg.NewJob {
		return pg.NewJob{Kind: pg.KindETLRecords, PrincipalScopeHash: pgtest.SHA("owner"),
			SubmissionKeyHash: pgtest.SHA(key), RequestDigest: pgtest.SHA("[]"), Payload: "[]", MaxAttempts: 3}
	}
	for pg.ConflictFreeInserts() > 0 { // left over by an earlier test of this process
		if _, err := pg.InsertJobs(ctx, pool, []pg.NewJob{job("drain " + uuid.NewString())}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := pg.InsertJobs(ctx, pool, []pg.NewJob{job("a"), job("b")})
	if err != nil || !first[0].Created || !first[1].Created {
		t.Fatalf("fresh batch: %+v %v", first, err)
	}
	if n := pg.ConflictFreeInserts(); n != 0 {
		t.Fatalf("a batch without conflicts set the cooldown to %d", n)
	}
	counts := func() (jobs, queued, announced int) {
		t.Helper()
		return pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records`),
			pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_claim_queue`),
			pgtest.Count(t, pool, `SELECT coalesce(sum(cardinality(job_record_ids)), 0) FROM etl_outbox_events WHERE event_kind = 'job_available'`)
	}
	jobs0, queued0, announced0 := counts()
	mixed, err := pg.InsertJobs(ctx, pool, []pg.NewJob{job("c"), job("b"), job("d")})
	if err != nil {
		t.Fatal(err)
	}
	if !mixed[0].Created || mixed[1].Created || mixed[1].JobID != first[1].JobID || !mixed[2].Created {
		t.Fatalf("mixed batch: %+v", mixed)
	}
	if n := pg.ConflictFreeInserts(); n != pg.ConflictCooldown {
		t.Fatalf("cooldown after a conflict = %d, want %d", n, pg.ConflictCooldown)
	}
	if jobs, queued, announced := counts(); jobs-jobs0 != 2 || queued-queued0 != 2 || announced-announced0 != 2 {
		t.Fatalf("the fallback added %d jobs, %d queue rows, %d announced; want 2 of each (nothing from the failed plain INSERT)",
			jobs-jobs0, queued-queued0, announced-announced0)
	}
	if _, err := pg.InsertJobs(ctx, pool, []pg.NewJob{job("e")}); err != nil {
		t.Fatal(err)
	}
	if n := pg.ConflictFreeInserts(); n != pg.ConflictCooldown-1 {
		t.Fatalf("cooldown after one more insert = %d, want %d", n, pg.ConflictCooldown-1)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	in, err := pg.InsertJobs(ctx, tx, []pg.NewJob{job("a"), job("f")})
	if err != nil || in[0].Created || in[0].JobID != first[0].JobID || !in[1].Created {
		t.Fatalf("in a transaction: %+v %v", in, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("the transaction did not survive the taken key: %v", err)
	}
}

// TestDecodeDigestAcceptsLowercaseHexOnly holds decodeDigest to
// encoding/hex on every digit and to the lowercase-only rule.
func TestDecodeDigestAcceptsLowercaseHexOnly(t *testing.T) {
	want := sha256.Sum256([]byte("x"))
	h := hex.EncodeToString(want[:])
	got, err := pg.DecodeDigest(make([]byte, 32), h)
	if err != nil || !bytes.Equal(got, want[:]) {
		t.Fatalf("decode %s: %x %v", h, got, err)
	}
	all := hex.EncodeToString([]byte{0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef})
	full := strings.Repeat(all, 4)
	if got, err := pg.DecodeDigest(make([]byte, 32), full); err != nil || hex.EncodeToString(got) != full {
		t.Fatalf("every digit: %x %v", got, err)
	}
	for i := 0; i < 256; i++ {
		c := byte(i)
		if strings.IndexByte("0123456789abcdef", c) >= 0 {
			continue
		}
		for _, at := range []int{0, 1, 63} {
			bad := []byte(h)
			bad[at] = c
			if _, err := pg.DecodeDigest(make([]byte, 32), string(bad)); err == nil {
				t.Fatalf("accepted byte %q at %d", c, at)
			}
		}
	}
	for _, n := range []int{0, 62, 63, 65, 66} {
		if _, err := pg.DecodeDigest(make([]byte, 32), strings.Repeat("a", n)); err == nil {
			t.Fatalf("accepted %d characters", n)
		}
	}
}

// TestInsertedJobIsTheStoredJob: the insert returns only what the database
// decided and fills the rest of each created Job from its input; that must
// be exactly what a read of the row returns.
func TestInsertedJobIsTheStoredJob(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	scope := pgtest.SHA("owner")
	jobs := []pg.NewJob{
		{Kind: pg.KindETLRecords, PrincipalScopeHash: scope, SubmissionKeyHash: pgtest.SHA("k1"), RequestDigest: pgtest.SHA("[1]"), Payload: "[1]", MaxAttempts: 3},
		{Kind: pg.KindDiagnostic, PrincipalScopeHash: scope, SubmissionKeyHash: pgtest.SHA("k2"), RequestDigest: pgtest.SHA("{}"), Payload: "{}", MaxAttempts: 1},
	}
	for _, insert := range []func(context.Context, pg.DBTX, []pg.NewJob) ([]pg.Inserted, error){pg.InsertJobs, pg.InsertJobsUnannounced} {
		for i := range jobs {
			jobs[i].SubmissionKeyHash = pgtest.SHA(uuid.NewString())
		}
		ins, err := insert(ctx, pool, jobs)
		if err != nil {
			t.Fatal(err)
		}
		for i, in := range ins {
			got, err := pg.GetJob(ctx, pool, scope, in.JobID)
			if err != nil {
				t.Fatal(err)
			}
			if !in.Created || in.Kind != got.Kind || in.Status != got.Status || in.AttemptCount != got.AttemptCount ||
				in.FailureCode != nil || in.CancellationCode != nil || got.FailureCode != nil || got.CancellationCode != nil ||
				!in.CreatedAt.Equal(got.CreatedAt) || !in.UpdatedAt.Equal(got.UpdatedAt) ||
				in.RequestDigest != got.RequestDigest || in.Lineage != nil || got.Lineage != nil ||
				in.Kind != jobs[i].Kind || in.Status != pg.StatusPending || in.AttemptCount != 0 {
				t.Fatalf("job %d: inserted %+v, stored %+v", i, in.Job, got)
			}
		}
	}
}
