package pg

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/mightyetl/mightyetl/internal/tracing"
)

// ErrReplaySourceNotFound: SubmitUpload's replay source is absent or
// another owner's (ErrNotFound stays the upload's).
var ErrReplaySourceNotFound = errors.New("replay source not found")

// SubmitUploadParams is one job to make from an upload.
type SubmitUploadParams struct {
	PrincipalScopeHash string
	UploadID           uuid.UUID
	// SubmissionKeyHash is the new job's submission_key_hash: the caller's
	// submission key hash, or its replay key hash when ReplayOf is set.
	SubmissionKeyHash string
	// SHA256 is the client's lowercase hex SHA-256 of the whole payload.
	SHA256 string
	// MaxBadRecords is stored on the load (>= 0).
	MaxBadRecords int64
	// MaxAttempts is the new job's max_attempts (a replay takes its
	// source's instead).
	MaxAttempts int
	// MaxUploadBytes and MaxRecords bound the payload (records only when
	// counted: see UploadManifest.Records).
	MaxUploadBytes int64
	MaxRecords     int64
	// ReplayOf, when not uuid.Nil, makes the job a replay of the owner's
	// FAILED or CANCELLED chunked job, with lineage as ReplayJob's.
	ReplayOf uuid.UUID
	// JobID is the new job's id; uuid.Nil draws a time-ordered one.
	JobID uuid.UUID
	// SubmitTraceparent is stored as submit_traceparent when not empty.
	SubmitTraceparent string
}

// SubmitUploadOutcome is the job SubmitUpload created or found.
type SubmitUploadOutcome struct {
	Job Job
	// Created is true when this call created Job, false when an earlier
	// submission with the same key and digest (and, for a replay, source)
	// did.
	Created bool
}

// UploadManifest is the request_payload of a chunked job: a small JSON
// document naming the upload (the payload itself stays in the chunks).
type UploadManifest struct {
	UploadID      uuid.UUID `json:"uploadId"`
	Format        string    `json:"format"`
	Bytes         int64     `json:"bytes"`
	Parts         int64     `json:"parts"`
	MaxBadRecords int64     `json:"maxBadRecords"`
}

// insertChunkedJobSQL inserts a chunked job with everything that goes with
// it, in one statement: the job row (ON CONFLICT DO NOTHING on the
// submission identity, as insertJobsSQL: concurrent identical submissions
// converge), its etl_chunked_job_queue row (never etl_job_claim_queue), its
// etl_chunked_loads row (LOADING, checkpoint at the start), the upload ->
// SUBMITTED, and the job_available outbox row (as insertJobsSQL writes it).
// The caller holds the upload row's lock.
var insertChunkedJobSQL = `
WITH ins AS (
    INSERT INTO etl_job_records AS j (job_record_id, job_kind, principal_scope_hash, submission_key_hash,
                                 request_digest, request_payload, max_attempts,
                                 replay_source_job_record_id, replay_root_job_record_id, replay_generation_count,
                                 submit_traceparent)
    VALUES ($1, '` + KindETLChunked + `', decode($2, 'hex'), decode($3, 'hex'), decode($4, 'hex'), $5, $6,
            $7, $8, $9, NULLIF($10, ''))` + conflictArbiter + `
    RETURNING j.job_record_id, j.job_status, j.attempt_count, j.created_at, j.updated_at
), queued AS (
    INSERT INTO etl_chunked_job_queue (job_record_id)
    SELECT job_record_id FROM ins
), loads AS (
    INSERT INTO etl_chunked_loads (job_record_id, upload_id, load_format, max_bad_records, payload_bytes, records_total)
    SELECT job_record_id, $11, $12, $13, $14, $15 FROM ins
), submitted AS (
    UPDATE etl_uploads u
    SET upload_state = 'SUBMITTED', job_record_id = ins.job_record_id, updated_at = clock_timestamp()
    FROM ins
    WHERE u.upload_id = $11
)` + availableEventCTE + `
SELECT job_record_id, job_status, attempt_count, created_at, updated_at FROM ins`

// lockUploadSQL locks the owner's upload for the submission. Lock: FOR
// UPDATE waits for a part commit in flight (which locks the owner's OPEN
// uploads) and keeps parts from committing until the submission commits.
const lockUploadSQL = `
SELECT upload_state, upload_format, (upload_state = 'OPEN' AND expires_at <= clock_timestamp())
FROM etl_uploads
WHERE upload_id = $1 AND principal_scope_hash = decode($2, 'hex')
FOR UPDATE`

// uploadPartAttemptsSQL lists the committed parts with their attempts.
const uploadPartAttemptsSQL = `
SELECT part_number, part_attempt_id, part_bytes
FROM etl_upload_parts
WHERE upload_id = $1
ORDER BY part_number`

// replaySourceSQL reads the replay source without a lock (the pre-check
// before the payload is read; the transaction locks it with
// lockReplaySourceSQL).
const replaySourceSQL = `
SELECT job_kind, job_status, max_attempts, encode(request_digest, 'hex'),
       replay_root_job_record_id, replay_generation_count
FROM etl_job_records
WHERE job_record_id = $1 AND principal_scope_hash = decode($2, 'hex')`

// partAttempt is one committed part as SubmitUpload verified it.
type partAttempt struct {
	number  int64
	attempt uuid.UUID
	bytes   int64
}

// SubmitUpload makes a job of kind etl_chunked from the owner's OPEN
// upload. In order:
//   - the key already made a job: that job (Created false) when it is a
//     chunked job with this digest (and, with ReplayOf, a replay of that
//     source); otherwise ErrUploadKeyReused, or ErrReplayKeyReused with
//     ReplayOf;
//   - absent or foreign upload: ErrNotFound; SUBMITTED: ErrUploadSubmitted;
//     expired: ErrUploadExpired;
//   - parts not 1..N: ErrUploadIncomplete; bytes beyond MaxUploadBytes:
//     ErrUploadTooLarge;
//   - with ReplayOf, the source checks of ReplayJob (ErrReplaySourceNotFound,
//     ErrReplaySourceActive, ErrReplaySourceSucceeded,
//     ErrReplayPayloadMismatch also when the source is not a chunked job,
//     ErrReplayGenerationExhausted);
//   - the stored payload is read in order (short keyset queries, never
//     whole in memory) to verify its SHA-256 (ErrUploadDigestMismatch) and
//     count its records (ErrUploadTooLarge beyond MaxRecords);
//   - then ONE transaction locks the upload, re-checks its state and that
//     its parts are the ones verified, and inserts the job, its chunked
//     queue row, its load row, its outbox row and the upload's SUBMITTED
//     state (insertChunkedJobSQL).
//
// The caller wakes the outbox relays after a created job (the outbox row
// does not notify at commit).
func SubmitUpload(ctx context.Context, db UploadDB, p SubmitUploadParams) (SubmitUploadOutcome, error) {
	want, err := decodeDigest(make([]byte, sha256Len), p.SHA256)
	if err != nil {
		return SubmitUploadOutcome{}, fmt.Errorf("submit upload: sha256: %w", err)
	}
	if p.JobID == uuid.Nil {
		if p.JobID, err = uuid.NewV7(); err != nil {
			return SubmitUploadOutcome{}, fmt.Errorf("submit upload: job id: %w", err)
		}
	}
	// The key's job, if any, answers before anything is read.
	if out, done, err := existingSubmission(ctx, db, p); done || err != nil {
		return out, err
	}
	// Parts can change until the transaction locks the upload; a
	// submission that raced a part commit reads the payload again.
	for range 3 {
		u, err := scanUpload(db.QueryRow(ctx, getUploadSQL, p.UploadID, p.PrincipalScopeHash))
		switch {
		case IsNoRows(err):
			return SubmitUploadOutcome{}, ErrNotFound
		case err != nil:
			return SubmitUploadOutcome{}, fmt.Errorf("submit upload: read upload: %w", err)
		case u.State != UploadOpen:
			// A concurrent submission with this key may have won it since
			// the first look.
			if out, done, err := existingSubmission(ctx, db, p); done || err != nil {
				return out, err
			}
			return SubmitUploadOutcome{}, ErrUploadSubmitted
		case u.Expired:
			return SubmitUploadOutcome{}, ErrUploadExpired
		}
		parts, err := readPartAttempts(ctx, db, p.UploadID)
		if err != nil {
			return SubmitUploadOutcome{}, err
		}
		var total int64
		for i, pa := range parts {
			if pa.number != int64(i+1) {
				return SubmitUploadOutcome{}, ErrUploadIncomplete
			}
			total += pa.bytes
		}
		if len(parts) == 0 {
			return SubmitUploadOutcome{}, ErrUploadIncomplete
		}
		if total > p.MaxUploadBytes {
			return SubmitUploadOutcome{}, ErrUploadTooLarge
		}
		if p.ReplayOf != uuid.Nil {
			if _, _, err := checkReplaySource(db.QueryRow(ctx, replaySourceSQL, p.ReplayOf, p.PrincipalScopeHash), p.SHA256); err != nil {
				return SubmitUploadOutcome{}, err
			}
		}
		sum, records, n, err := scanPayload(ctx, db, p.UploadID, u.Format)
		if err != nil {
			return SubmitUploadOutcome{}, err
		}
		if n != total || subtle.ConstantTimeCompare(sum, want) != 1 {
			return SubmitUploadOutcome{}, ErrUploadDigestMismatch
		}
		if records != nil && *records > p.MaxRecords {
			return SubmitUploadOutcome{}, ErrUploadTooLarge
		}
		manifest, err := json.Marshal(UploadManifest{UploadID: p.UploadID, Format: u.Format, Bytes: total,
			Parts: int64(len(parts)), MaxBadRecords: p.MaxBadRecords})
		if err != nil {
			return SubmitUploadOutcome{}, fmt.Errorf("submit upload: manifest: %w", err)
		}
		var out SubmitUploadOutcome
		changed := false
		err = withReadCommittedTx(ctx, db, func(tx pgx.Tx) error {
			var state, format string
			var expired bool
			err := tx.QueryRow(ctx, lockUploadSQL, p.UploadID, p.PrincipalScopeHash).Scan(&state, &format, &expired)
			switch {
			case IsNoRows(err):
				return ErrNotFound
			case err != nil:
				return fmt.Errorf("lock upload: %w", err)
			}
			if state != UploadOpen {
				// Another submission won the upload; with the same key it is
				// this one's job.
				if o, done, err := existingSubmission(ctx, tx, p); done || err != nil {
					out = o
					return err
				}
				return ErrUploadSubmitted
			}
			if expired {
				return ErrUploadExpired
			}
			now, err := readPartAttempts(ctx, tx, p.UploadID)
			if err != nil {
				return err
			}
			if !slices.Equal(now, parts) {
				changed = true
				return nil
			}
			o, err := insertChunkedJob(ctx, tx, p, manifest, u.Format, total, records)
			out = o
			return err
		})
		if err != nil {
			return SubmitUploadOutcome{}, err
		}
		if !changed {
			return out, nil
		}
	}
	// Parts kept changing under the submission: the client is still
	// sending them. Retryable.
	return SubmitUploadOutcome{}, fmt.Errorf("submit upload: parts changed while verifying: %w", ErrConflictVanished)
}

// insertChunkedJob runs insertChunkedJobSQL in tx (which holds the upload's
// lock), with the replay source's lineage when p.ReplayOf is set.
func insertChunkedJob(ctx context.Context, tx pgx.Tx, p SubmitUploadParams, manifest []byte, format string, total int64, records *int64) (SubmitUploadOutcome, error) {
	maxAttempts := p.MaxAttempts
	var source, root pgtype.UUID
	var generation pgtype.Int4
	var lineage *Lineage
	if p.ReplayOf != uuid.Nil {
		// Lock: as ReplayJob, FOR UPDATE on the source serialises the
		// replays of one source.
		l, attempts, err := checkReplaySource(tx.QueryRow(ctx, lockReplaySourceSQL, p.ReplayOf, p.PrincipalScopeHash), p.SHA256)
		if err != nil {
			return SubmitUploadOutcome{}, err
		}
		// The key may have made this replay while this transaction waited.
		if o, done, err := existingSubmission(ctx, tx, p); done || err != nil {
			return o, err
		}
		l.SourceJobID = p.ReplayOf
		if l.RootJobID == uuid.Nil {
			l.RootJobID = p.ReplayOf // generation 1: the source is the root
		}
		lineage, maxAttempts = &l, attempts
		source = pgtype.UUID{Bytes: l.SourceJobID, Valid: true}
		root = pgtype.UUID{Bytes: l.RootJobID, Valid: true}
		generation = pgtype.Int4{Int32: int32(l.Generation), Valid: true}
	}
	var recordsTotal pgtype.Int8
	if records != nil {
		recordsTotal = pgtype.Int8{Int64: *records, Valid: true}
	}
	var j Job
	var id pgtype.UUID
	err := tx.QueryRow(ctx, insertChunkedJobSQL, [16]byte(p.JobID), p.PrincipalScopeHash, p.SubmissionKeyHash, p.SHA256,
		string(manifest), maxAttempts, source, root, generation, p.SubmitTraceparent,
		[16]byte(p.UploadID), format, p.MaxBadRecords, total, recordsTotal).
		Scan(&id, &j.Status, &j.AttemptCount, &j.CreatedAt, &j.UpdatedAt)
	if IsNoRows(err) {
		// The key's job committed after this call's first look.
		o, done, err := existingSubmission(ctx, tx, p)
		if err == nil && !done {
			err = fmt.Errorf("submit upload: %w", ErrConflictVanished)
		}
		return o, err
	}
	if err != nil {
		return SubmitUploadOutcome{}, fmt.Errorf("insert chunked job: %w", err)
	}
	j.JobID, j.Kind, j.RequestDigest, j.Lineage = id.Bytes, KindETLChunked, p.SHA256, lineage
	return SubmitUploadOutcome{Job: j, Created: true}, nil
}

// existingSubmission looks up the job the submission key already made:
// done false when there is none; otherwise that job when it is the same
// submission, or the key-reuse error.
func existingSubmission(ctx context.Context, db DBTX, p SubmitUploadParams) (SubmitUploadOutcome, bool, error) {
	j, err := scanJob(db.QueryRow(ctx, replayByKeySQL, p.PrincipalScopeHash, p.SubmissionKeyHash))
	if IsNoRows(err) {
		return SubmitUploadOutcome{}, false, nil
	}
	if err != nil {
		return SubmitUploadOutcome{}, true, fmt.Errorf("read job by key: %w", err)
	}
	same := j.Kind == KindETLChunked && subtle.ConstantTimeCompare([]byte(j.RequestDigest), []byte(p.SHA256)) == 1
	if p.ReplayOf == uuid.Nil {
		if !same || j.Lineage != nil {
			return SubmitUploadOutcome{}, true, ErrUploadKeyReused
		}
	} else if !same || j.Lineage == nil || j.Lineage.SourceJobID != p.ReplayOf {
		return SubmitUploadOutcome{}, true, ErrReplayKeyReused
	}
	return SubmitUploadOutcome{Job: j}, true, nil
}

// checkReplaySource applies ReplayJob's source rules to the row of
// replaySourceSQL or lockReplaySourceSQL, and returns the new job's lineage
// (SourceJobID left to the caller) and max attempts.
func checkReplaySource(row pgx.Row, digest string) (Lineage, int, error) {
	var (
		kind, status, sourceDigest string
		maxAttempts                int
		root                       *uuid.UUID
		generation                 *int32
	)
	err := row.Scan(&kind, &status, &maxAttempts, &sourceDigest, &root, &generation)
	if IsNoRows(err) {
		return Lineage{}, 0, ErrReplaySourceNotFound
	}
	if err != nil {
		return Lineage{}, 0, fmt.Errorf("read replay source: %w", err)
	}
	switch status {
	case StatusPending, StatusRunning:
		return Lineage{}, 0, ErrReplaySourceActive
	case StatusSucceeded:
		return Lineage{}, 0, ErrReplaySourceSucceeded
	}
	if kind != KindETLChunked || subtle.ConstantTimeCompare([]byte(sourceDigest), []byte(digest)) != 1 {
		return Lineage{}, 0, ErrReplayPayloadMismatch
	}
	l := Lineage{Generation: 1}
	if root != nil && generation != nil {
		if *generation >= MaxReplayGeneration {
			return Lineage{}, 0, ErrReplayGenerationExhausted
		}
		l.RootJobID, l.Generation = *root, int(*generation)+1
	}
	return l, maxAttempts, nil
}

// readPartAttempts lists an upload's committed parts with their attempts.
func readPartAttempts(ctx context.Context, db DBTX, uploadID uuid.UUID) ([]partAttempt, error) {
	rows, err := db.Query(ctx, uploadPartAttemptsSQL, uploadID)
	if err != nil {
		return nil, fmt.Errorf("read upload parts: %w", err)
	}
	parts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (partAttempt, error) {
		var pa partAttempt
		var id pgtype.UUID
		err := row.Scan(&pa.number, &id, &pa.bytes)
		pa.attempt = id.Bytes
		return pa, err
	})
	if err != nil {
		return nil, fmt.Errorf("read upload parts: %w", err)
	}
	return parts, nil
}

// scanPayload reads the upload's stored payload once, in order, and returns
// its SHA-256, its byte count and its records when they are cheap to count
// (nil otherwise; see RecordCounter).
//
// The stored chunks are read on a goroutine of its own, one buffer ahead of
// the hashing and counting, so the database's reads and the hashing
// overlap; at most scanBuffers buffers of scanBufferBytes are held.
func scanPayload(ctx context.Context, db DBTX, uploadID uuid.UUID, format string) (sum []byte, records *int64, n int64, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	full := make(chan []byte, scanBuffers-1)
	empty := make(chan []byte, scanBuffers)
	for range scanBuffers {
		empty <- make([]byte, scanBufferBytes)
	}
	var readErr error
	go func() {
		defer close(full)
		r := StreamPayload(ctx, db, uploadID, 1, 0)
		defer r.Close()
		for {
			var buf []byte
			select {
			case buf = <-empty:
			case <-ctx.Done():
				readErr = ctx.Err()
				return
			}
			k, err := io.ReadFull(r, buf)
			if k > 0 {
				full <- buf[:k]
			}
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					readErr = err
				}
				return
			}
		}
	}()
	h := sha256.New()
	rc := NewRecordCounter(format)
	for buf := range full {
		h.Write(buf)
		_, _ = rc.Write(buf)
		n += int64(len(buf))
		empty <- buf[:cap(buf)]
	}
	// full is closed: the reader ended, and readErr is set before.
	if readErr != nil {
		return nil, nil, 0, fmt.Errorf("submit upload: read payload: %w", readErr)
	}
	return h.Sum(nil), rc.Records(), n, nil
}

// scanPayload's read-ahead: buffers and their size.
const (
	scanBuffers     = 3
	scanBufferBytes = 1 << 20
)

// RecordCounter counts the records of a payload as its bytes stream
// through Write, without parsing them: for JSON Lines the lines holding
// anything but spaces, tabs and carriage returns; for a JSON array its
// top-level elements (by a scan of brackets, braces, strings and commas).
// It validates nothing: a payload that is not shaped like its format
// (a JSON array that does not start with '[' or does not close) counts as
// unknown. Not safe for concurrent use.
type RecordCounter struct {
	array bool
	// JSON Lines.
	lines    int64
	lineFull bool // the current line holds a non-blank byte
	// JSON array.
	state    arrayState
	depth    int
	inString bool
	escaped  bool
	elements int64
	pending  bool // an element started at depth 1 since the last comma
}

type arrayState uint8

const (
	arrayBefore arrayState = iota // before '['
	arrayInside                   // inside the top-level array
	arrayAfter                    // after its ']'
	arrayBroken                   // not a JSON array's shape
)

// NewRecordCounter returns a counter for format (UploadFormatJSONL or
// UploadFormatJSONArray).
func NewRecordCounter(format string) *RecordCounter {
	return &RecordCounter{array: format == UploadFormatJSONArray}
}

// Write counts p's records; it never fails.
func (c *RecordCounter) Write(p []byte) (int, error) {
	if !c.array {
		// Line by line: a line's first byte is usually not blank, so the
		// cost is finding the line ends (bytes.IndexByte).
		for rest := p; len(rest) > 0; {
			end := bytes.IndexByte(rest, '\n')
			line := rest
			if end >= 0 {
				line = rest[:end]
			}
			if !c.lineFull {
				for _, b := range line {
					if b != ' ' && b != '\t' && b != '\r' {
						c.lineFull = true
						break
					}
				}
			}
			if end < 0 {
				break
			}
			if c.lineFull {
				c.lines++
			}
			c.lineFull = false
			rest = rest[end+1:]
		}
		return len(p), nil
	}
	for _, b := range p {
		if c.state == arrayBroken {
			break
		}
		c.arrayByte(b)
	}
	return len(p), nil
}

func (c *RecordCounter) arrayByte(b byte) {
	blank := b == ' ' || b == '\t' || b == '\r' || b == '\n'
	switch c.state {
	case arrayBefore:
		switch {
		case blank:
		case b == '[':
			c.state, c.depth = arrayInside, 1
		default:
			c.state = arrayBroken
		}
		return
	case arrayAfter:
		if !blank {
			c.state = arrayBroken
		}
		return
	}
	if c.inString {
		switch {
		case c.escaped:
			c.escaped = false
		case b == '\\':
			c.escaped = true
		case b == '"':
			c.inString = false
		}
		return
	}
	if blank {
		return
	}
	if c.depth == 1 && b != ',' && b != ']' && !c.pending {
		c.pending = true
		c.elements++
	}
	switch b {
	case '"':
		c.inString = true
	case '[', '{':
		c.depth++
	case ']', '}':
		c.depth--
		if c.depth == 0 {
			c.state = arrayAfter
		}
		if c.depth < 0 {
			c.state = arrayBroken
		}
	case ',':
		if c.depth == 1 {
			c.pending = false
		}
	}
}

// Records returns the records counted so far, once the whole payload was
// written; nil when unknown (a JSON array that is not one).
func (c *RecordCounter) Records() *int64 {
	if !c.array {
		n := c.lines
		if c.lineFull {
			n++
		}
		return &n
	}
	if c.state != arrayAfter {
		return nil
	}
	n := c.elements
	return &n
}

func init() {
	tracing.RegisterStatement("uploads.insert_chunked_job", insertChunkedJobSQL)
	tracing.RegisterStatement("uploads.lock", lockUploadSQL)
	tracing.RegisterStatement("uploads.part_attempts", uploadPartAttemptsSQL)
	tracing.RegisterStatement("uploads.replay_source", replaySourceSQL)
}
