package pgtest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// FixtureLeaseOwner is the lease owner of a RUNNING chunked fixture job: no
// worker of a test has this id, and the lease runs for an hour, so no
// claim takes the job from the fixture.
const FixtureLeaseOwner = "fixture-chunked-worker"

// ChunkedJob describes a chunked job (kind etl_chunked, migrations 00023
// and 00024) that InsertChunkedJob writes directly by SQL, as the upload
// submit and the worker's chunk transactions would have left it. Zero
// fields take the defaults noted.
type ChunkedJob struct {
	// Owner is the principal scope hash; "" means SHA(DefaultFixtureOwner).
	Owner string
	// Status is PENDING (the default), RUNNING (leased for an hour to
	// FixtureLeaseOwner, attempt 1), SUCCEEDED (load VISIBLE) or FAILED
	// (FailureCode, default etl_invalid_record; load DISCARDED).
	Status      string
	FailureCode string
	// PartBytes are the upload's committed parts' sizes (no chunk rows are
	// written); nil means one part of 1000 bytes.
	PartBytes []int64
	// RecordsTotal is the load's record count, nil when unknown.
	RecordsTotal *int64
	// MaxBadRecords is the job's allowance of skipped records.
	MaxBadRecords int64
	// SubmittedAgo places the job's and the load's creation that far in
	// the past by the database clock (zero: now).
	SubmittedAgo time.Duration
	// Checkpoint is the load's checkpoint; nil means none yet.
	Checkpoint *ChunkedCheckpoint
	// BadRecords lists record numbers skipped as etl_invalid_record.
	BadRecords []int64
}

// ChunkedCheckpoint is a load's checkpoint as a chunk transaction writes it.
type ChunkedCheckpoint struct {
	ChunksDone, RecordsLoaded, BadRecords int64
	// NextPartNumber (default 1), NextPartOffset and NextRecordNumber
	// (default RecordsLoaded+BadRecords+1) say where the next record starts.
	NextPartNumber, NextPartOffset, NextRecordNumber int64
	FailedRecordNumber                               *int64
	// Ago places checkpoint_at that far before the database clock's now.
	Ago time.Duration
}

// FixtureDB is what InsertChunkedJob writes through: a *pgxpool.Pool.
type FixtureDB interface {
	pg.DBTX
	pg.TxBeginner
}

// InsertChunkedJob writes a chunked job in one transaction: the job row
// (manifest payload while PENDING or RUNNING), its etl_chunked_job_queue
// row while not terminal, the SUBMITTED upload with its part rows, the
// etl_chunked_loads row with the checkpoint, and the bad-record rows. It
// returns the job id.
func InsertChunkedJob(t testing.TB, db FixtureDB, f ChunkedJob) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	id, upload := uuid.Must(uuid.NewV7()), uuid.New()
	if f.Owner == "" {
		f.Owner = SHA(DefaultFixtureOwner)
	}
	if f.Status == "" {
		f.Status = pg.StatusPending
	}
	if f.Status == pg.StatusFailed && f.FailureCode == "" {
		f.FailureCode = codes.InvalidRecord
	}
	if f.PartBytes == nil {
		f.PartBytes = []int64{1000}
	}
	var total int64
	for _, b := range f.PartBytes {
		total += b
	}
	manifest, err := json.Marshal(map[string]any{"uploadId": upload.String(), "format": "jsonl",
		"bytes": total, "parts": len(f.PartBytes), "maxBadRecords": f.MaxBadRecords})
	if err != nil {
		t.Fatal(err)
	}
	var payload, failure *string
	active := f.Status == pg.StatusPending || f.Status == pg.StatusRunning
	if active {
		p := string(manifest)
		payload = &p
	}
	if f.Status == pg.StatusFailed {
		failure = &f.FailureCode
	}
	loadState := map[string]string{pg.StatusSucceeded: "VISIBLE", pg.StatusFailed: "DISCARDED"}[f.Status]
	if loadState == "" {
		loadState = "LOADING"
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatalf("pgtest: chunked job: %v", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	ago := f.SubmittedAgo.Microseconds()
	exec := func(what, sql string, args ...any) {
		t.Helper()
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("pgtest: chunked job: %s: %v", what, err)
		}
	}
	exec("job", `
INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash, request_digest,
    request_payload, job_status, attempt_count, max_attempts, failure_code, created_at, updated_at,
    lease_claim_id, lease_owner_id, lease_expires_at, lease_fencing_token)
SELECT $1, 'etl_chunked', decode($2, 'hex'), decode($3, 'hex'), decode($4, 'hex'), $5, $6,
       CASE WHEN $6 = 'PENDING' THEN 0 ELSE 1 END, 3, $7,
       clock_timestamp() - make_interval(secs => $8 / 1e6), clock_timestamp(),
       r.claim, r.owner, r.expires, r.token
FROM (SELECT CASE WHEN $6 = 'RUNNING' THEN gen_random_uuid() END AS claim,
             CASE WHEN $6 = 'RUNNING' THEN $9 END AS owner,
             CASE WHEN $6 = 'RUNNING' THEN clock_timestamp() + interval '1 hour' END AS expires,
             CASE WHEN $6 = 'RUNNING' THEN 1::bigint END AS token) r`,
		id, f.Owner, SHA(uuid.NewString()), SHA(string(manifest)), payload, f.Status, failure, ago, FixtureLeaseOwner)
	if active {
		exec("queue", `INSERT INTO etl_chunked_job_queue (job_record_id) VALUES ($1)`, id)
	}
	exec("upload", `
INSERT INTO etl_uploads (upload_id, principal_scope_hash, upload_format, upload_state, staged_bytes, job_record_id, expires_at)
VALUES ($1, decode($2, 'hex'), 'jsonl', 'SUBMITTED', $3, $4, clock_timestamp() + interval '1 day')`, upload, f.Owner, total, id)
	for i, b := range f.PartBytes {
		exec("part", `
INSERT INTO etl_upload_parts (upload_id, part_number, part_attempt_id, part_bytes, part_sha256, chunk_count)
VALUES ($1, $2::bigint, gen_random_uuid(), $3, sha256(convert_to($2::bigint::text, 'UTF8')), 0)`, upload, i+1, b)
	}
	exec("load", `
INSERT INTO etl_chunked_loads (job_record_id, upload_id, load_format, load_state, max_bad_records, payload_bytes,
    records_total, created_at, updated_at)
VALUES ($1, $2, 'jsonl', $3, $4, $5, $6, clock_timestamp() - make_interval(secs => $7 / 1e6), clock_timestamp())`,
		id, upload, loadState, f.MaxBadRecords, total, f.RecordsTotal, ago)
	for _, n := range f.BadRecords {
		exec("bad record", `INSERT INTO etl_chunked_load_bad_records (job_record_id, record_number, error_code)
VALUES ($1, $2, $3)`, id, n, codes.InvalidRecord)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("pgtest: chunked job: %v", err)
	}
	if f.Checkpoint != nil {
		SetChunkedCheckpoint(t, db, id, *f.Checkpoint)
	}
	return id
}

// SetChunkedCheckpoint writes the checkpoint of chunked job id's load as a
// chunk transaction would (checkpoint_at from the database clock, moved
// c.Ago into the past). It fails t unless the load exists.
func SetChunkedCheckpoint(t testing.TB, db pg.DBTX, id uuid.UUID, c ChunkedCheckpoint) {
	t.Helper()
	if c.NextPartNumber == 0 {
		c.NextPartNumber = 1
	}
	if c.NextRecordNumber == 0 {
		c.NextRecordNumber = c.RecordsLoaded + c.BadRecords + 1
	}
	tag, err := db.Exec(context.Background(), `
UPDATE etl_chunked_loads
SET chunks_done = $2, records_loaded = $3, bad_records = $4, next_part_number = $5, next_part_offset = $6,
    next_record_number = $7, failed_record_number = $8,
    checkpoint_at = clock_timestamp() - make_interval(secs => $9 / 1e6), updated_at = clock_timestamp()
WHERE job_record_id = $1`,
		id, c.ChunksDone, c.RecordsLoaded, c.BadRecords, c.NextPartNumber, c.NextPartOffset, c.NextRecordNumber,
		c.FailedRecordNumber, c.Ago.Microseconds())
	if err != nil {
		t.Fatalf("pgtest: set checkpoint: %v", err)
	}
	if tag.RowsAffected() != 1 {
		t.Fatal("pgtest: set checkpoint: no load row")
	}
}
