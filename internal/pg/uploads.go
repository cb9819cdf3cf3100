package pg

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/mightyetl/mightyetl/internal/tracing"
)

// Upload formats (etl_uploads.upload_format, etl_chunked_loads.load_format).
const (
	// UploadFormatJSONL is JSON Lines: one JSON object per non-empty line.
	UploadFormatJSONL = "jsonl"
	// UploadFormatJSONArray is one JSON array of objects.
	UploadFormatJSONArray = "json_array"
)

// Upload states (etl_uploads.upload_state).
const (
	UploadOpen      = "OPEN"
	UploadSubmitted = "SUBMITTED"
)

// Storage sizes of an upload's bytes.
const (
	// MaxUploadChunkBytes is the most one etl_upload_chunks row holds.
	MaxUploadChunkBytes = 1 << 20
	// UploadBatchBytes is the most of a part PutPart holds in memory: it
	// reads this much of the body, then writes it as chunks in one COPY
	// (its own short transaction), then reads on.
	UploadBatchBytes = 4 << 20
	// MaxUploadPartNumber is the highest part number (parts are 1-based).
	MaxUploadPartNumber = 10000
)

// Upload refusals. The functions return them unwrapped; nothing was written
// (a part's chunks already copied are deleted again).
var (
	// ErrUploadExpired: the upload is OPEN and its expires_at has passed.
	ErrUploadExpired = errors.New("upload expired")
	// ErrUploadSubmitted: the upload already made a job; it takes no more
	// parts and no second job, and cannot be aborted.
	ErrUploadSubmitted = errors.New("upload already submitted")
	// ErrUploadIncomplete: the committed parts are not 1..N (N >= 1).
	ErrUploadIncomplete = errors.New("upload parts are not contiguous from 1")
	// ErrUploadDigestMismatch: a part's or the whole payload's SHA-256 is
	// not the one the client declared.
	ErrUploadDigestMismatch = errors.New("upload digest mismatch")
	// ErrUploadTooLarge: a part beyond its limit, the upload's bytes beyond
	// theirs, or its records beyond theirs.
	ErrUploadTooLarge = errors.New("upload too large")
	// ErrUploadOwnerQuota: the owner's OPEN uploads would stage more bytes
	// than the per-owner bound.
	ErrUploadOwnerQuota = errors.New("owner staged bytes exceeded")
	// ErrUploadKeyReused: the submission key already made another job (of
	// another kind, payload or lineage).
	ErrUploadKeyReused = errors.New("upload submission key reused")
)

// UploadBodyError is a failure of the part body's reader (a broken
// connection, a corrupt gzip stream): the client's doing, not the
// database's. Err is the reader's error.
type UploadBodyError struct{ Err error }

func (e *UploadBodyError) Error() string { return "read upload part body: " + e.Err.Error() }

// Unwrap returns the reader's error.
func (e *UploadBodyError) Unwrap() error { return e.Err }

// Upload is the owner-visible state of an upload: never the owner, never a
// part attempt id.
type Upload struct {
	UploadID    uuid.UUID
	Format      string
	State       string
	StagedBytes int64
	// JobID is the job a SUBMITTED upload made, uuid.Nil while OPEN.
	JobID     uuid.UUID
	CreatedAt time.Time
	UpdatedAt time.Time
	ExpiresAt time.Time
	// Expired is true when the upload is OPEN and expires_at has passed
	// (database clock).
	Expired bool
	// Parts are the committed parts in part order (GetUpload only).
	Parts []UploadPart
}

// UploadPart is one committed part.
type UploadPart struct {
	Number int64
	Bytes  int64
	// SHA256 is the lowercase hex SHA-256 of the part's bytes.
	SHA256 string
}

// UploadDB is what the upload functions need: a pool (each statement and
// each COPY its own short transaction) that also begins transactions.
type UploadDB interface {
	DBTX
	TxBeginner
}

// NewUpload is one upload to create.
type NewUpload struct {
	PrincipalScopeHash string
	// Format is UploadFormatJSONL or UploadFormatJSONArray.
	Format string
	// Expiry is how long the upload stays OPEN without a committed part
	// (each committed part moves expires_at to at least now + Expiry).
	Expiry time.Duration
}

// uploadColumns are the owner-visible columns of etl_uploads u, in
// scanUpload order. expires_at is compared with clock_timestamp(): the
// database clock decides expiry, never the host's.
const uploadColumns = `u.upload_id, u.upload_format, u.upload_state, u.staged_bytes, u.job_record_id,
       u.created_at, u.updated_at, u.expires_at,
       (u.upload_state = 'OPEN' AND u.expires_at <= clock_timestamp()) AS expired`

func scanUpload(row scanner) (Upload, error) {
	var u Upload
	var id, job pgtype.UUID
	if err := row.Scan(&id, &u.Format, &u.State, &u.StagedBytes, &job, &u.CreatedAt, &u.UpdatedAt, &u.ExpiresAt, &u.Expired); err != nil {
		return Upload{}, err
	}
	u.UploadID = id.Bytes
	if job.Valid {
		u.JobID = job.Bytes
	}
	return u, nil
}

// createUploadSQL inserts an OPEN upload; expires_at from clock_timestamp().
var createUploadSQL = `
INSERT INTO etl_uploads AS u (upload_id, principal_scope_hash, upload_format, expires_at)
VALUES ($1, decode($2, 'hex'), $3, clock_timestamp() + $4::interval)
RETURNING ` + uploadColumns

// CreateUpload inserts a new OPEN upload of the owner and returns it.
func CreateUpload(ctx context.Context, db DBTX, n NewUpload) (Upload, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return Upload{}, fmt.Errorf("create upload: id: %w", err)
	}
	u, err := scanUpload(db.QueryRow(ctx, createUploadSQL, id, n.PrincipalScopeHash, n.Format, n.Expiry))
	if err != nil {
		return Upload{}, fmt.Errorf("create upload: %w", err)
	}
	u.Parts = []UploadPart{}
	return u, nil
}

// getUploadSQL reads the owner's upload (the owner's hash is part of the
// key: another owner's upload is absent).
var getUploadSQL = `SELECT ` + uploadColumns + `
FROM etl_uploads u
WHERE u.upload_id = $1 AND u.principal_scope_hash = decode($2, 'hex')`

// uploadPartsSQL lists an upload's committed parts in order.
const uploadPartsSQL = `
SELECT part_number, part_bytes, encode(part_sha256, 'hex')
FROM etl_upload_parts
WHERE upload_id = $1
ORDER BY part_number`

// GetUpload returns the owner's upload with its committed parts, and
// ErrNotFound when it is absent or another owner's. An expired OPEN upload
// is returned with Expired set (the caller decides what that means).
func GetUpload(ctx context.Context, db DBTX, principalScopeHash string, uploadID uuid.UUID) (Upload, error) {
	u, err := scanUpload(db.QueryRow(ctx, getUploadSQL, uploadID, principalScopeHash))
	if IsNoRows(err) {
		return Upload{}, ErrNotFound
	}
	if err != nil {
		return Upload{}, fmt.Errorf("get upload: %w", err)
	}
	rows, err := db.Query(ctx, uploadPartsSQL, uploadID)
	if err != nil {
		return Upload{}, fmt.Errorf("get upload parts: %w", err)
	}
	u.Parts, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (UploadPart, error) {
		var p UploadPart
		err := row.Scan(&p.Number, &p.Bytes, &p.SHA256)
		return p, err
	})
	if err != nil {
		return Upload{}, fmt.Errorf("get upload parts: %w", err)
	}
	return u, nil
}

// PutPartParams is one part to store.
type PutPartParams struct {
	PrincipalScopeHash string
	UploadID           uuid.UUID
	// PartNumber is 1..MaxUploadPartNumber.
	PartNumber int64
	// SHA256 is the client's lowercase hex SHA-256 of the part's bytes;
	// empty means none was declared (the part's digest is computed and
	// returned, never refused: the caller verifies the whole payload).
	SHA256 string
	// Body yields the part's (decompressed) bytes. Its errors come back as
	// *UploadBodyError.
	Body io.Reader
	// MaxPartBytes bounds the part; MaxUploadBytes the upload's staged
	// bytes; OwnerMaxStagedBytes the staged bytes of all the owner's OPEN
	// uploads. Each must be positive.
	MaxPartBytes        int64
	MaxUploadBytes      int64
	OwnerMaxStagedBytes int64
	// Expiry moves the upload's expires_at to at least now + Expiry when
	// the part commits; zero leaves it.
	Expiry time.Duration
}

// putPartCheckSQL reads what PutPart checks before it reads the body: the
// upload's state, the bytes it stages without the part being replaced, and
// the bytes the owner's other OPEN uploads stage. No lock: the final
// transaction decides.
var putPartCheckSQL = `
SELECT u.upload_state, (u.upload_state = 'OPEN' AND u.expires_at <= clock_timestamp()),
       u.staged_bytes - coalesce((SELECT p.part_bytes FROM etl_upload_parts p
                                  WHERE p.upload_id = u.upload_id AND p.part_number = $3), 0),
       (SELECT coalesce(sum(o.staged_bytes), 0)::bigint FROM etl_uploads o
        WHERE o.principal_scope_hash = u.principal_scope_hash AND o.upload_state = 'OPEN'
          AND o.upload_id <> u.upload_id)
FROM etl_uploads u
WHERE u.upload_id = $1 AND u.principal_scope_hash = decode($2, 'hex')`

// lockOwnerUploadsSQL locks every OPEN upload of the owner, in upload_id
// order (one order for every locker: no deadlock), and reads their staged
// bytes. Lock: FOR UPDATE serialises the part commits of one owner, so the
// per-owner bound holds however many parts commit at once, and keeps
// SubmitUpload (which locks its upload row) from submitting an upload
// while one of its parts commits.
const lockOwnerUploadsSQL = `
SELECT upload_id, staged_bytes, expires_at <= clock_timestamp()
FROM etl_uploads
WHERE principal_scope_hash = decode($1, 'hex') AND upload_state = 'OPEN'
ORDER BY upload_id
FOR UPDATE`

// uploadStateSQL reads the state of the owner's upload (for the refusal
// when it is not among the OPEN ones lockOwnerUploadsSQL locked).
const uploadStateSQL = `
SELECT upload_state FROM etl_uploads
WHERE upload_id = $1 AND principal_scope_hash = decode($2, 'hex')`

// replacedPartSQL reads the part a commit replaces; the upload row's lock
// serialises every commit of the upload's parts.
const replacedPartSQL = `
SELECT part_attempt_id, part_bytes FROM etl_upload_parts
WHERE upload_id = $1 AND part_number = $2`

// upsertPartSQL points the part at its new attempt.
const upsertPartSQL = `
INSERT INTO etl_upload_parts (upload_id, part_number, part_attempt_id, part_bytes, part_sha256, chunk_count)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (upload_id, part_number) DO UPDATE
SET part_attempt_id = excluded.part_attempt_id, part_bytes = excluded.part_bytes,
    part_sha256 = excluded.part_sha256, chunk_count = excluded.chunk_count,
    committed_at = clock_timestamp()`

// stagePartSQL sets the upload's staged bytes and moves its expiry forward
// (database clock).
const stagePartSQL = `
UPDATE etl_uploads
SET staged_bytes = $2, updated_at = clock_timestamp(),
    expires_at = greatest(expires_at, clock_timestamp() + $3::interval)
WHERE upload_id = $1`

// deleteAttemptSQL deletes one part attempt's chunks (at most
// MaxPartBytes / MaxUploadChunkBytes rows).
const deleteAttemptSQL = `DELETE FROM etl_upload_chunks WHERE upload_id = $1 AND part_attempt_id = $2`

// PutPart stores one part of the owner's OPEN upload from p.Body, streaming:
// it reads at most UploadBatchBytes at a time, cuts them into chunks of at
// most MaxUploadChunkBytes and COPYs them under a fresh part attempt id, each
// batch in its own short transaction, hashing and counting as it goes; no
// transaction is open while it reads the body. Then one short transaction
// checks the limits under the owner's upload locks, points the part row at
// the new attempt (replacing an earlier one), sets the upload's staged
// bytes and deletes the replaced attempt's chunks. Refusals (nothing of the
// part remains): ErrNotFound (absent or foreign), ErrUploadSubmitted,
// ErrUploadExpired, ErrUploadTooLarge (the part beyond MaxPartBytes or the
// upload beyond MaxUploadBytes, detected as soon as the bytes arrive),
// ErrUploadOwnerQuota, ErrUploadDigestMismatch, *UploadBodyError. The
// part's bytes are never held whole in memory. An empty p.SHA256 declares
// no digest: the part's is computed and returned, never refused (the NATS
// Object Store path, whose caller checks the whole object's digest).
func PutPart(ctx context.Context, db UploadDB, p PutPartParams) (UploadPart, error) {
	var want []byte
	if p.SHA256 != "" {
		var err error
		if want, err = decodeDigest(make([]byte, sha256Len), p.SHA256); err != nil {
			return UploadPart{}, fmt.Errorf("put part: sha256: %w", err)
		}
	}
	if p.PartNumber < 1 || p.PartNumber > MaxUploadPartNumber {
		return UploadPart{}, fmt.Errorf("put part: part number %d outside 1..%d", p.PartNumber, MaxUploadPartNumber)
	}
	var state string
	var expired bool
	var uploadOthers, ownerOthers int64
	err := db.QueryRow(ctx, putPartCheckSQL, p.UploadID, p.PrincipalScopeHash, p.PartNumber).
		Scan(&state, &expired, &uploadOthers, &ownerOthers)
	switch {
	case IsNoRows(err):
		return UploadPart{}, ErrNotFound
	case err != nil:
		return UploadPart{}, fmt.Errorf("put part: check upload: %w", err)
	case state != UploadOpen:
		return UploadPart{}, ErrUploadSubmitted
	case expired:
		return UploadPart{}, ErrUploadExpired
	}
	// The most this part may hold by each bound, as known now; the final
	// transaction checks again under lock.
	limitErr := func(n int64) error {
		switch {
		case n > p.MaxPartBytes, uploadOthers+n > p.MaxUploadBytes:
			return ErrUploadTooLarge
		case ownerOthers+uploadOthers+n > p.OwnerMaxStagedBytes:
			return ErrUploadOwnerQuota
		}
		return nil
	}
	allowed := min(p.MaxPartBytes, p.MaxUploadBytes-uploadOthers, p.OwnerMaxStagedBytes-ownerOthers-uploadOthers)
	if allowed < 0 {
		return UploadPart{}, limitErr(0)
	}

	attempt, err := uuid.NewV7()
	if err != nil {
		return UploadPart{}, fmt.Errorf("put part: attempt id: %w", err)
	}
	written := false // some chunk of the attempt may exist
	cleanup := func() {
		if written {
			// Best effort, also when ctx ended: an attempt no part row points
			// at is garbage the maintainer prunes with its upload.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_, _ = db.Exec(cctx, deleteAttemptSQL, p.UploadID, attempt)
		}
	}
	h := sha256.New()
	buf := make([]byte, min(UploadBatchBytes, allowed+1))
	var total, chunks int64
	for {
		// Never read more than one byte beyond the allowance.
		n, rerr := fill(p.Body, buf[:min(int64(len(buf)), allowed+1-total)])
		if n > 0 {
			total += int64(n)
			if total > allowed {
				cleanup()
				return UploadPart{}, limitErr(total)
			}
			h.Write(buf[:n])
			rows := make([][]any, 0, (n+MaxUploadChunkBytes-1)/MaxUploadChunkBytes)
			for off := 0; off < n; off += MaxUploadChunkBytes {
				end := min(off+MaxUploadChunkBytes, n)
				rows = append(rows, []any{[16]byte(p.UploadID), [16]byte(attempt), chunks, buf[off:end]})
				chunks++
			}
			written = true
			if err := copyChunks(ctx, db, rows); err != nil {
				cleanup()
				return UploadPart{}, fmt.Errorf("put part: copy chunks: %w", err)
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			cleanup()
			return UploadPart{}, &UploadBodyError{Err: rerr}
		}
	}
	sum := h.Sum(nil)
	if want != nil && subtle.ConstantTimeCompare(sum, want) != 1 {
		cleanup()
		return UploadPart{}, ErrUploadDigestMismatch
	}
	part := UploadPart{Number: p.PartNumber, Bytes: total, SHA256: hex.EncodeToString(sum)}
	err = withReadCommittedTx(ctx, db, func(tx pgx.Tx) error {
		return commitPart(ctx, tx, p, part, sum, attempt, chunks)
	})
	if err != nil {
		cleanup()
		return UploadPart{}, err
	}
	return part, nil
}

// chunkColumns are the columns copyChunks writes.
var chunkColumns = []string{"upload_id", "part_attempt_id", "chunk_index", "chunk_data"}

// lz4Unsupported is set once the server refused lz4 TOAST compression
// (built without it): chunks are then copied with the server's default.
var lz4Unsupported atomic.Bool

// setLZ4SQL makes the chunks of one COPY compressed with lz4 instead of the
// default pglz: a chunk is stored compressed out of line (TOAST), and lz4
// compressed a payload of JSON Lines to about the same size at about twice
// pglz's speed on the same machine (256 MiB: 148 against 142 MiB stored,
// the parts stored in 16 s against 35 s on a loaded 2-core machine). SET
// LOCAL: a transaction setting, as a pooler in transaction mode requires.
const setLZ4SQL = `SET LOCAL default_toast_compression = 'lz4'`

// copyChunks writes one batch of chunk rows by COPY in its own short
// transaction on db, lz4-compressed when the server supports it.
func copyChunks(ctx context.Context, db UploadDB, rows [][]any) error {
	if !lz4Unsupported.Load() {
		err := WithTx(ctx, db, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, setLZ4SQL); err != nil {
				return err
			}
			_, err := tx.CopyFrom(ctx, pgx.Identifier{"etl_upload_chunks"}, chunkColumns, pgx.CopyFromRows(rows))
			return err
		})
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" { // invalid_parameter_value: no lz4 in this server
			return err
		}
		lz4Unsupported.Store(true)
	}
	// One COPY on the pool: its own short transaction.
	_, err := db.CopyFrom(ctx, pgx.Identifier{"etl_upload_chunks"}, chunkColumns, pgx.CopyFromRows(rows))
	return err
}

// fill reads from r until buf is full (nil error), r ends (io.EOF, with
// the bytes read before it) or r fails (its error, with the bytes read
// before it). Unlike io.ReadFull it keeps a reader's own
// io.ErrUnexpectedEOF (a truncated HTTP body) apart from the end.
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// commitPart is PutPart's final transaction.
func commitPart(ctx context.Context, tx pgx.Tx, p PutPartParams, part UploadPart, sum []byte, attempt uuid.UUID, chunks int64) error {
	rows, err := tx.Query(ctx, lockOwnerUploadsSQL, p.PrincipalScopeHash)
	if err != nil {
		return fmt.Errorf("put part: lock owner uploads: %w", err)
	}
	var ownerOthers, staged int64
	found, expired := false, false
	for rows.Next() {
		var id pgtype.UUID
		var b int64
		var exp bool
		if err := rows.Scan(&id, &b, &exp); err != nil {
			rows.Close()
			return fmt.Errorf("put part: lock owner uploads: %w", err)
		}
		if uuid.UUID(id.Bytes) == p.UploadID {
			found, staged, expired = true, b, exp
		} else {
			ownerOthers += b
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("put part: lock owner uploads: %w", err)
	}
	if !found {
		var state string
		err := tx.QueryRow(ctx, uploadStateSQL, p.UploadID, p.PrincipalScopeHash).Scan(&state)
		if IsNoRows(err) {
			return ErrNotFound // aborted or pruned meanwhile
		}
		if err != nil {
			return fmt.Errorf("put part: read upload: %w", err)
		}
		return ErrUploadSubmitted
	}
	if expired {
		return ErrUploadExpired
	}
	var old pgtype.UUID
	var oldBytes int64
	if err := tx.QueryRow(ctx, replacedPartSQL, p.UploadID, p.PartNumber).Scan(&old, &oldBytes); err != nil && !IsNoRows(err) {
		return fmt.Errorf("put part: read replaced part: %w", err)
	}
	newStaged := staged - oldBytes + part.Bytes
	// A part that does not grow the upload is admitted whatever the bounds
	// (they may have been lowered since).
	if part.Bytes > oldBytes {
		if newStaged > p.MaxUploadBytes {
			return ErrUploadTooLarge
		}
		if ownerOthers+newStaged > p.OwnerMaxStagedBytes {
			return ErrUploadOwnerQuota
		}
	}
	if _, err := tx.Exec(ctx, upsertPartSQL, p.UploadID, p.PartNumber, attempt, part.Bytes, sum, chunks); err != nil {
		return fmt.Errorf("put part: upsert part: %w", err)
	}
	if _, err := tx.Exec(ctx, stagePartSQL, p.UploadID, newStaged, p.Expiry); err != nil {
		return fmt.Errorf("put part: stage: %w", err)
	}
	if old.Valid {
		if _, err := tx.Exec(ctx, deleteAttemptSQL, p.UploadID, old); err != nil {
			return fmt.Errorf("put part: delete replaced attempt: %w", err)
		}
	}
	return nil
}

// abortUploadSQL deletes the owner's OPEN upload and its part rows in one
// statement (the chunks go afterwards, in batches: DeleteUploadChunks).
// Lock: the DELETE takes the upload row's lock, so it waits for a part
// commit or a submission in flight and then sees its outcome.
var abortUploadSQL = `
WITH gone AS (
    DELETE FROM etl_uploads u
    WHERE u.upload_id = $1 AND u.principal_scope_hash = decode($2, 'hex') AND u.upload_state = 'OPEN'
    RETURNING u.upload_id
), parts AS (
    DELETE FROM etl_upload_parts p USING gone WHERE p.upload_id = gone.upload_id
)
SELECT count(*) FROM gone`

// AbortUpload deletes the owner's OPEN upload (expired or not) and its part
// rows in one short transaction; its chunks are left for
// DeleteUploadChunks (or the maintainer: chunks without an upload row are
// garbage). ErrNotFound when absent or foreign, ErrUploadSubmitted when it
// made a job.
func AbortUpload(ctx context.Context, db DBTX, principalScopeHash string, uploadID uuid.UUID) error {
	var n int
	if err := db.QueryRow(ctx, abortUploadSQL, uploadID, principalScopeHash).Scan(&n); err != nil {
		return fmt.Errorf("abort upload: %w", err)
	}
	if n == 1 {
		return nil
	}
	var state string
	err := db.QueryRow(ctx, uploadStateSQL, uploadID, principalScopeHash).Scan(&state)
	if IsNoRows(err) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("abort upload: %w", err)
	}
	return ErrUploadSubmitted
}

// deleteUploadChunksSQL deletes up to $2 chunks of an upload, by primary
// key (each batch its own short transaction).
const deleteUploadChunksSQL = `
DELETE FROM etl_upload_chunks c
USING (SELECT upload_id, part_attempt_id, chunk_index FROM etl_upload_chunks
       WHERE upload_id = $1 LIMIT $2) d
WHERE c.upload_id = d.upload_id AND c.part_attempt_id = d.part_attempt_id AND c.chunk_index = d.chunk_index`

// DeleteUploadChunks deletes every chunk of uploadID in batches of at most
// batch rows (<= 0 means 64), each its own statement, and returns how many
// it deleted. For an aborted upload, or the upload of a terminal job (whose
// rows keep no payload). Safe to repeat.
func DeleteUploadChunks(ctx context.Context, db DBTX, uploadID uuid.UUID, batch int) (int64, error) {
	if batch <= 0 {
		batch = 64
	}
	var total int64
	for {
		tag, err := db.Exec(ctx, deleteUploadChunksSQL, uploadID, batch)
		if err != nil {
			return total, fmt.Errorf("delete upload chunks: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}

func init() {
	tracing.RegisterStatement("uploads.create", createUploadSQL)
	tracing.RegisterStatement("uploads.get", getUploadSQL)
	tracing.RegisterStatement("uploads.parts", uploadPartsSQL)
	tracing.RegisterStatement("uploads.put_check", putPartCheckSQL)
	tracing.RegisterStatement("uploads.lock_owner", lockOwnerUploadsSQL)
	tracing.RegisterStatement("uploads.state", uploadStateSQL)
	tracing.RegisterStatement("uploads.replaced_part", replacedPartSQL)
	tracing.RegisterStatement("uploads.upsert_part", upsertPartSQL)
	tracing.RegisterStatement("uploads.stage_part", stagePartSQL)
	tracing.RegisterStatement("uploads.delete_attempt", deleteAttemptSQL)
	tracing.RegisterStatement("uploads.abort", abortUploadSQL)
	tracing.RegisterStatement("uploads.delete_chunks", deleteUploadChunksSQL)
	tracing.RegisterStatement("uploads.set_lz4", setLZ4SQL)
}
