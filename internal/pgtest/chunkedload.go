package pgtest

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// ChunkedUpload is a PENDING chunked job (kind etl_chunked) with its payload
// stored, as a submitted upload leaves it (migration 00023): the SUBMITTED
// upload, its parts and their chunks, the job row with its manifest, its
// etl_chunked_job_queue row and its LOADING load. Zero fields take the
// defaults noted.
type ChunkedUpload struct {
	// Parts are the payload's parts, in order (their concatenation is the
	// payload); each is stored as chunk rows of at most ChunkSize bytes.
	Parts [][]byte
	// ChunkSize is the stored chunks' size (default 1 MiB).
	ChunkSize int
	// Format is "jsonl" (the default) or "json_array".
	Format string
	// MaxBadRecords is the job's allowance of skipped records.
	MaxBadRecords int64
	// MaxAttempts is the job's attempt budget (DefaultFixtureMaxAttempts).
	MaxAttempts int
	// Owner is the principal scope hash (SHA(DefaultFixtureOwner)).
	Owner string
}

// InsertChunkedUpload writes u in one transaction and returns the job id
// and the upload id.
func InsertChunkedUpload(t testing.TB, db *pgxpool.Pool, u ChunkedUpload) (job, upload uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	job, upload = uuid.Must(uuid.NewV7()), uuid.New()
	if u.ChunkSize <= 0 {
		u.ChunkSize = 1 << 20
	}
	if u.Format == "" {
		u.Format = "jsonl"
	}
	if u.MaxAttempts == 0 {
		u.MaxAttempts = DefaultFixtureMaxAttempts
	}
	if u.Owner == "" {
		u.Owner = SHA(DefaultFixtureOwner)
	}
	whole := sha256.New()
	var total int64
	for _, p := range u.Parts {
		whole.Write(p)
		total += int64(len(p))
	}
	manifest, err := json.Marshal(map[string]any{"uploadId": upload.String(), "format": u.Format,
		"bytes": total, "parts": len(u.Parts), "maxBadRecords": u.MaxBadRecords})
	if err != nil {
		t.Fatal(err)
	}
	err = pg.WithTx(ctx, db, func(tx pgx.Tx) error {
		exec := func(sql string, args ...any) {
			if err == nil {
				_, err = tx.Exec(ctx, sql, args...)
			}
		}
		exec(`INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash,
    request_digest, request_payload, max_attempts)
VALUES ($1, 'etl_chunked', decode($2, 'hex'), decode($3, 'hex'), $4, $5, $6)`,
			job, u.Owner, SHA(uuid.NewString()), whole.Sum(nil), string(manifest), u.MaxAttempts)
		exec(`INSERT INTO etl_chunked_job_queue (job_record_id) VALUES ($1)`, job)
		exec(`INSERT INTO etl_uploads (upload_id, principal_scope_hash, upload_format, upload_state, staged_bytes,
    job_record_id, expires_at)
VALUES ($1, decode($2, 'hex'), $3, 'SUBMITTED', $4, $5, clock_timestamp() + interval '1 day')`,
			upload, u.Owner, u.Format, total, job)
		for i, p := range u.Parts {
			attempt := uuid.New()
			sum := sha256.Sum256(p)
			var n int64
			for off := 0; off < len(p); off += u.ChunkSize {
				exec(`INSERT INTO etl_upload_chunks (upload_id, part_attempt_id, chunk_index, chunk_data)
VALUES ($1, $2, $3, $4)`, upload, attempt, n, p[off:min(off+u.ChunkSize, len(p))])
				n++
			}
			exec(`INSERT INTO etl_upload_parts (upload_id, part_number, part_attempt_id, part_bytes, part_sha256, chunk_count)
VALUES ($1, $2, $3, $4, $5, $6)`, upload, i+1, attempt, len(p), sum[:], n)
		}
		exec(`INSERT INTO etl_chunked_loads (job_record_id, upload_id, load_format, max_bad_records, payload_bytes)
VALUES ($1, $2, $3, $4, $5)`, job, upload, u.Format, u.MaxBadRecords, total)
		return err
	})
	if err != nil {
		t.Fatalf("pgtest: insert chunked upload: %v", err)
	}
	return job, upload
}

// ExpireChunkedLease moves the lease of RUNNING chunked job id ago into the
// past by the database clock (a chunked job has no claim-queue row to move,
// so ExpireLease does not fit it). It waits for a chunk transaction holding
// the job row. It fails t unless the job was RUNNING.
func ExpireChunkedLease(t testing.TB, db pg.DBTX, id uuid.UUID, ago time.Duration) {
	t.Helper()
	tag, err := db.Exec(context.Background(), `UPDATE etl_job_records
SET lease_expires_at = clock_timestamp() - $2::bigint * interval '1 microsecond'
WHERE job_record_id = $1 AND job_status = 'RUNNING'`, id, ago.Microseconds())
	if err != nil {
		t.Fatalf("pgtest: expire chunked lease: %v", err)
	}
	if tag.RowsAffected() != 1 {
		t.Fatal("pgtest: expire chunked lease: the job is not RUNNING")
	}
}
