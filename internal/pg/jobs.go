package pg

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/mightyetl/mightyetl/internal/tracing"
)

// Job kinds.
const (
	KindETLRecords = "etl_records"
	KindDiagnostic = "diagnostic"
	// KindETLChunked is a large job loaded chunk by chunk from an upload
	// (issue 32, migration 00023): its payload is a small manifest, its
	// data lives in etl_upload_chunks, its checkpoint in etl_chunked_loads.
	KindETLChunked = "etl_chunked"
)

// Job states.
const (
	StatusPending   = "PENDING"
	StatusRunning   = "RUNNING"
	StatusSucceeded = "SUCCEEDED"
	StatusFailed    = "FAILED"
	StatusCancelled = "CANCELLED"
)

// NewJob is one job to insert.
type NewJob struct {
	// JobID is the new job's id; uuid.Nil draws a time-ordered one (UUIDv7),
	// so new jobs land near each other in every index keyed by job id.
	JobID              uuid.UUID
	Kind               string
	PrincipalScopeHash string
	SubmissionKeyHash  string
	RequestDigest      string
	Payload            string
	MaxAttempts        int
	// Lineage, when not nil, makes the job a replay (see ReplayJob); nil
	// inserts a job without lineage.
	Lineage *Lineage
	// SubmitTraceparent is the W3C traceparent of the span that stored the
	// job (submit_traceparent, migration 00012), empty when tracing is off
	// or unsampled. When no job of an insert has one, the statement does not
	// mention the column at all.
	SubmitTraceparent string
	// Priority is 1 (highest) .. 4 (lowest); 0 means DefaultPriority. It
	// orders the job within its owner's share of every claim (migration
	// 00025, internal/lease).
	Priority int
	// NotBefore, when not zero, is when the job becomes claimable (a
	// scheduled job); zero means at once. The intake bounds it by its
	// horizon; the database clock decides when it has passed.
	NotBefore time.Time
}

// Priorities (migration 00025).
const (
	HighestPriority = 1
	DefaultPriority = 2
	LowestPriority  = 4
)

// Lineage places a replay job in its chain: the job it replays (Source),
// the first job of the chain (Root) and its generation (1..MaxReplayGeneration;
// 1 means Source is Root). Lineage never changes after insert (the
// etl_job_replay_lineage_guard trigger refuses any edit).
type Lineage struct {
	SourceJobID uuid.UUID
	RootJobID   uuid.UUID
	Generation  int
}

// Job is the owner-visible state of a job: never the payload, never a lease
// id, never a hash.
type Job struct {
	JobID            uuid.UUID
	Kind             string
	Status           string
	AttemptCount     int
	FailureCode      *string
	CancellationCode *string
	CreatedAt        time.Time
	UpdatedAt        time.Time
	// Lineage is the replay lineage of a replay job, nil for any other job.
	Lineage *Lineage
	// RequestDigest is internal: it decides whether a resubmission is identical.
	RequestDigest string
	// Priority (1..4) and AvailableAt (when the job becomes, or became,
	// claimable: its notBefore while a scheduled job waits, its next
	// attempt's time after a retry) are filled by the owner's reads and
	// writes of this package (GetJob, ListJobs, InsertJobs, ReplayJob,
	// CancelJob, FindSubmittedJob: scheduleColumns); other reads leave them
	// zero (CancelJob fills only Priority: a cancelled job is never
	// claimable).
	Priority    int
	AvailableAt time.Time
	// NotBefore is AvailableAt while the job is PENDING and AvailableAt is
	// later than the database clock at the read (a scheduled job, or a
	// retry waiting out its backoff); zero otherwise. Filled where
	// AvailableAt is.
	NotBefore time.Time
	// Progress is the load's checkpoint of a job of kind etl_chunked, nil
	// for every other kind (and for a chunked job whose load row is gone).
	// GetJob and ListJobs fill it; other reads leave it nil.
	Progress *Progress
}

// Inserted is the outcome of inserting one NewJob.
type Inserted struct {
	Job
	// Created is true when this call created the job, or an earlier call
	// given the same NewJob.JobID did (a retry), and false when the
	// (principal, key) pair already had another job (RequestDigest tells
	// whether it was the same request).
	Created bool
}

// insertJobsSQL inserts many jobs, their claim-queue rows and one
// job_available outbox group row for all of them in one statement. ON
// CONFLICT DO NOTHING on the submission identity of (principal_scope_hash,
// submission_key_hash) (conflictArbiter) makes concurrent identical
// submissions converge: the
// loser waits for the winner's commit and then inserts nothing. The lineage
// arrays hold NULL for jobs without lineage. It returns only what the
// database decided (id, status and attempt count from the column defaults,
// the timestamps, the priority, available_at and the notBefore it makes);
// the rest of each created Job is its input (kind, digest, lineage), which
// spares the statement the projection and hex encoding of every column per
// row.
//
// insertJobsUnannouncedSQL and its traced twin are the same statements
// without the job_available row, for a caller that announces the jobs
// itself after the commit (InsertJobsUnannounced).
var insertJobsSQL = `
WITH ins AS (
    INSERT INTO etl_job_records AS j (job_record_id, job_kind, principal_scope_hash, submission_key_hash,
                                 request_digest, request_payload, max_attempts,
                                 replay_source_job_record_id, replay_root_job_record_id, replay_generation_count, job_priority, available_at)
    -- available_at: the job's notBefore, or the database clock's now when
    -- it has none (NULL in $12: greatest ignores NULLs) or one already
    -- past, so a past notBefore runs at once without overtaking the jobs
    -- queued before it (claims take the oldest claimable_at first).
    SELECT u.id, u.kind, u.scope, u.key, u.digest, u.payload, u.attempts, u.source, u.root, u.generation,
           u.priority, greatest(u.not_before, clock_timestamp())
    FROM unnest($1::uuid[], $2::text[], $3::bytea[], $4::bytea[], $5::bytea[], $6::text[], $7::int[],
                $8::uuid[], $9::uuid[], $10::int[], $11::bigint[], $12::timestamptz[])
         AS u(id, kind, scope, key, digest, payload, attempts, source, root, generation, priority, not_before)
` + conflictArbiter + `
    RETURNING j.job_record_id, j.job_status, j.attempt_count, j.created_at, j.updated_at, j.available_at,
              j.job_priority, ` + OwnerSlotOf("j.principal_scope_hash") + ` AS owner_slot
), queued AS (
    INSERT INTO etl_job_claim_queue (job_record_id, claimable_at, owner_slot, priority)
    SELECT job_record_id, available_at, owner_slot, job_priority FROM ins
), owners AS (
    -- Each owner with a job here is offered to claims by the time its
    -- earliest job is claimable (migration 00025). An owner already due and
    -- served by the claims (idle_visits = 0) needs no write, so a busy
    -- owner's submissions take no lock on its row; an owner the claims found
    -- empty, or never saw, is made due now (ON CONFLICT locks its row until
    -- this transaction ends). A claim that marks an owner idle while this
    -- insert is uncommitted looks again within 50 ms (its first backoff).
    INSERT INTO etl_claim_owners AS o (owner_slot, due_at)
    SELECT i.owner_slot, min(i.available_at) FROM ins i
    GROUP BY i.owner_slot
    HAVING NOT EXISTS (SELECT 1 FROM etl_claim_owners x
                       WHERE x.owner_slot = i.owner_slot AND x.due_at <= min(i.available_at) AND x.idle_visits = 0)
    -- One lock order for every insert: two groups upserting the same
    -- owners never deadlock.
    ORDER BY i.owner_slot
    ON CONFLICT (owner_slot) DO UPDATE
    SET due_at = least(o.due_at, excluded.due_at), idle_visits = 0, updated_at = clock_timestamp()
)` + availableEventCTE + `
SELECT job_record_id, job_status, attempt_count, created_at, updated_at, job_priority, available_at,
       ` + notBeforeOf("job_status", "available_at") + ` FROM ins`

// availableEventCTE is insertJobsSQL's job_available outbox row.
const availableEventCTE = `, events AS (
    -- One advisory row for every job this statement inserted (migration
    -- 00006): the relay sends one coalesced wake-up per batch anyway.
    INSERT INTO etl_outbox_events (event_kind, job_status, job_record_ids, attempt_counts)
    SELECT 'job_available', 'PENDING', array_agg(job_record_id), array_agg(0)
    FROM ins
    HAVING count(*) > 0
)`

// withoutAvailableEvent removes availableEventCTE from an insert statement.
func withoutAvailableEvent(sql string) string { return withoutPart(sql, availableEventCTE) }

// withoutPart removes part, which sql must contain, from sql (the insert
// statements' variants are derived from one text, so a missing part is a
// programming error found at package initialisation).
func withoutPart(sql, part string) string {
	if !strings.Contains(sql, part) {
		panic("pg: insert statement without " + strings.TrimSpace(part))
	}
	return strings.Replace(sql, part, "", 1)
}

// insertTracedJobsSQL is insertJobsSQL that also stores submit_traceparent
// ($11, NULL for a job without one). It runs only for a batch in which some
// job has a trace context, so an untraced insert costs nothing extra.
var insertTracedJobsSQL = mustReplace(insertJobsSQL,
	"job_priority, available_at)\n", "job_priority, available_at, submit_traceparent)\n",
	"u.priority, greatest(u.not_before, clock_timestamp())\n", "u.priority, greatest(u.not_before, clock_timestamp()), u.traceparent\n",
	"$12::timestamptz[])", "$12::timestamptz[], $13::text[])",
	"priority, not_before)\n", "priority, not_before, traceparent)\n",
)

// mustReplace applies each (old, new) pair of pairs to sql once, and panics
// at package initialisation when an old text is missing (a statement
// derived from another must not silently stay the same).
func mustReplace(sql string, pairs ...string) string {
	for i := 0; i < len(pairs); i += 2 {
		if !strings.Contains(sql, pairs[i]) {
			panic("pg: statement without " + strings.TrimSpace(pairs[i]))
		}
		sql = strings.Replace(sql, pairs[i], pairs[i+1], 1)
	}
	return sql
}

var (
	insertJobsUnannouncedSQL       = withoutAvailableEvent(insertJobsSQL)
	insertTracedJobsUnannouncedSQL = withoutAvailableEvent(insertTracedJobsSQL)
)

// conflictArbiter is the insert statements' ON CONFLICT clause: the
// expression of the submission-key unique index over the inserted row's
// columns.
var conflictArbiter = "\n    ON CONFLICT ((" + identityOf("principal_scope_hash", "submission_key_hash") + ")) DO NOTHING"

// identityOf is the expression of the submission-key unique index
// etl_job_submission_key_unique (migration 00015) over the digests owner and
// key (SQL expressions of type bytea): the first 16 bytes of
// SHA-256(owner || key), as a uuid.
func identityOf(owner, key string) string {
	return "encode(substr(sha256(" + owner + " || " + key + "), 1, 16), 'hex')::uuid"
}

// pairOf matches the job row j to the (principal, key) pair owner, key (SQL
// expressions of type bytea): through the submission-key unique index (the
// identity of j's columns, which the planner matches to the index), then on
// the pair itself (identities could collide; pairs are what is unique).
func pairOf(owner, key string) string {
	return identityOf("j.principal_scope_hash", "j.submission_key_hash") + " = " + identityOf(owner, key) +
		"\n  AND j.principal_scope_hash = " + owner + " AND j.submission_key_hash = " + key
}

// OwnerSlotOf is the SQL expression of an owner's slot (migration 00025)
// from its principal scope hash (an SQL expression of type bytea): the
// hash's first 8 bytes as a signed bigint. Slots are the fairness buckets
// of the claim; two owners share one only if their SHA-256 digests share
// their first 64 bits.
func OwnerSlotOf(scopeHash string) string {
	return "('x' || encode(substr(" + scopeHash + ", 1, 8), 'hex'))::bit(64)::bigint"
}

// OwnerSlot is OwnerSlotOf computed in Go from a principal scope hash in
// hex; ok is false when it is not one.
func OwnerSlot(principalScopeHash string) (slot int64, ok bool) {
	var b [sha256Len]byte
	if _, err := decodeDigest(b[:], principalScopeHash); err != nil {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(b[:8])), true
}

// withoutConflictArbiter removes conflictArbiter from an insert statement:
// a plain INSERT, which a taken (principal, key) pair fails with 23505.
func withoutConflictArbiter(sql string) string { return withoutPart(sql, conflictArbiter) }

// insertStatements is one flavour of the job insert: untraced and traced,
// each with ON CONFLICT and as a plain INSERT.
type insertStatements struct {
	plain, traced           string // ON CONFLICT (principal, key) DO NOTHING
	plainFirst, tracedFirst string // the same without ON CONFLICT
}

func newInsertStatements(plain, traced string) insertStatements {
	return insertStatements{plain: plain, traced: traced,
		plainFirst: withoutConflictArbiter(plain), tracedFirst: withoutConflictArbiter(traced)}
}

var (
	announcedInserts   = newInsertStatements(insertJobsSQL, insertTracedJobsSQL)
	unannouncedInserts = newInsertStatements(insertJobsUnannouncedSQL, insertTracedJobsUnannouncedSQL)
)

// conflictFreeInserts counts down the inserts that go straight to ON
// CONFLICT after a plain INSERT met a taken (principal, key) pair, so a
// burst of resubmissions (client retries, NATS redeliveries) does not pay
// two statements each; see insertJobs.
var conflictFreeInserts atomic.Int32

// conflictCooldown is how many inserts after a conflict use ON CONFLICT
// directly.
const conflictCooldown = 64

// existingJobsSQL reads the rows that hold the given (principal, key)
// pairs, through the submission-key unique index.
var existingJobsSQL = `
SELECT j.principal_scope_hash, j.submission_key_hash, ` + scheduleColumns + `, ` + jobColumns + `
FROM etl_job_records j
JOIN unnest($1::bytea[], $2::bytea[]) AS k(principal_scope_hash, submission_key_hash)
  ON ` + pairOf("k.principal_scope_hash", "k.submission_key_hash")

// jobColumns are the owner-visible columns, in scanJob order, qualified by
// the alias j. request_digest is a 32-byte bytea (migration 00014); it is
// read as its hex text, the form the SQL functions return and Job carries.
const jobColumns = `j.job_record_id, j.job_kind, j.job_status, j.attempt_count, j.failure_code, j.cancellation_code, ` +
	`j.created_at, j.updated_at, encode(j.request_digest, 'hex') AS request_digest, ` +
	`j.replay_source_job_record_id, j.replay_root_job_record_id, j.replay_generation_count`

type scanner interface{ Scan(dest ...any) error }

// scheduleColumns are the job's priority, available_at (migration 00025)
// and notBefore (notBeforeOf), read before jobColumns by scanScheduledJob.
var scheduleColumns = `j.job_priority, j.available_at, ` + notBeforeOf("j.job_status", "j.available_at")

// notBeforeOf is the SQL expression of a job's notBefore from its status
// and available_at (SQL expressions): available_at while the job is
// PENDING and available_at is later than the database clock
// (clock_timestamp(): the time of this read, also inside a longer
// transaction), else NULL. The claim compares the same clock
// (claimable_at <= clock_timestamp()), so a job shown with a notBefore is
// one no claim could take at that moment.
func notBeforeOf(status, availableAt string) string {
	return "CASE WHEN " + status + " = '" + StatusPending + "' AND " + availableAt + " > clock_timestamp() THEN " + availableAt + " END"
}

// scanScheduledJob scans extra, then scheduleColumns, then jobColumns.
func scanScheduledJob(row scanner, extra ...any) (Job, error) {
	var priority int64
	var availableAt time.Time
	var notBefore pgtype.Timestamptz
	j, err := scanJob(row, append(extra, &priority, &availableAt, &notBefore)...)
	j.Priority, j.AvailableAt = int(priority), availableAt
	if notBefore.Valid {
		j.NotBefore = notBefore.Time
	}
	return j, err
}

// scanJob scans extra, then jobColumns.
func scanJob(row scanner, extra ...any) (Job, error) {
	var j Job
	// pgtype values decode the binary columns in place (uuid.UUID is a
	// sql.Scanner that goes through each id's text form).
	var id, source, root pgtype.UUID
	var generation pgtype.Int4
	dest := append(extra, &id, &j.Kind, &j.Status, &j.AttemptCount, &j.FailureCode, &j.CancellationCode,
		&j.CreatedAt, &j.UpdatedAt, &j.RequestDigest, &source, &root, &generation)
	if err := row.Scan(dest...); err != nil {
		return Job{}, err
	}
	j.JobID = id.Bytes
	if source.Valid && root.Valid && generation.Valid {
		j.Lineage = &Lineage{SourceJobID: source.Bytes, RootJobID: root.Bytes, Generation: int(generation.Int32)}
	}
	return j, nil
}

// InsertJobs inserts jobs in one statement on db (a pool or the caller's
// transaction) and returns one Inserted per input, in order. A job whose
// (principal, key) pair already exists is not inserted; its existing row is
// returned with Created false, unless that row carries the job's own JobID.
// Callers batch concurrent submissions into one call to share a commit.
//
// ErrConflictVanished means a pair's existing row vanished (was pruned) between the
// insert and the lookup of existing rows; the caller may retry. Unless db is
// a transaction, the insert has committed by then, so a retry must pass the
// same JobIDs: the jobs the first call created then come back with Created
// true, not as somebody else's.
func InsertJobs(ctx context.Context, db DBTX, jobs []NewJob) ([]Inserted, error) {
	return insertJobs(ctx, db, jobs, announcedInserts)
}

// InsertJobsUnannounced is InsertJobs without the job_available outbox
// row: for a caller that publishes the wake-up itself once the insert has
// committed (an intake with its own NATS connection,
// outbox.Relay.AnnounceAvailable), which saves the row, its index entries
// and the relay transaction that would take it. The wake-up is advisory
// (workers poll), so an announcement lost between the commit and the
// publish only delays the pickup to the workers' poll.
func InsertJobsUnannounced(ctx context.Context, db DBTX, jobs []NewJob) ([]Inserted, error) {
	return insertJobs(ctx, db, jobs, unannouncedInserts)
}

// insertJobs runs one of the insert statements. Outside a transaction
// (db is not a pgx.Tx: a pool or a connection in autocommit) it first tries
// the plain INSERT, which skips ON CONFLICT's speculative insertion (a
// unique-index probe before each row and a confirmation record after it:
// measured at about a sixth of the statement). A (principal, key) pair that
// is already taken fails the whole statement with 23505 and writes nothing;
// the ON CONFLICT statement then runs, as it always does inside a
// transaction, which such an error would abort. Concurrent identical
// submissions still converge: the plain INSERT waits on the other's
// uncommitted index entry like ON CONFLICT does, then fails over to it.
func insertJobs(ctx context.Context, db DBTX, jobs []NewJob, stmts insertStatements) ([]Inserted, error) {
	out := make([]Inserted, len(jobs))
	if len(jobs) == 0 {
		return out, nil
	}
	n := len(jobs)
	// [16]byte encodes as binary uuid directly; uuid.UUID would go through
	// its driver.Valuer text form.
	ids, kinds, payloads := make([][16]byte, n), make([]string, n), make([]string, n)
	// The identity digests are 32-byte bytea columns (migration 00014); they
	// arrive as hex and are decoded here, into one backing array.
	scopes, keys, digests := make([][]byte, n), make([][]byte, n), make([][]byte, n)
	raw := make([]byte, 3*sha256Len*n)
	attempts := make([]int32, n)
	sources, roots := make([]pgtype.UUID, n), make([]pgtype.UUID, n)
	generations := make([]pgtype.Int4, n)
	priorities := make([]int64, n)
	notBefores := make([]pgtype.Timestamptz, n) // NULL: at once, by the database clock
	var traceparents []pgtype.Text              // nil unless some job has one
	for i, j := range jobs {
		if j.JobID == uuid.Nil {
			id, err := uuid.NewV7()
			if err != nil {
				return nil, fmt.Errorf("insert jobs: job id: %w", err)
			}
			j.JobID = id
		}
		ids[i], kinds[i], payloads[i], attempts[i] = j.JobID, j.Kind, j.Payload, int32(j.MaxAttempts)
		var err error
		if scopes[i], err = decodeDigest(raw[(3*i)*sha256Len:(3*i+1)*sha256Len], j.PrincipalScopeHash); err != nil {
			return nil, fmt.Errorf("insert jobs: principal scope hash: %w", err)
		}
		if keys[i], err = decodeDigest(raw[(3*i+1)*sha256Len:(3*i+2)*sha256Len], j.SubmissionKeyHash); err != nil {
			return nil, fmt.Errorf("insert jobs: submission key hash: %w", err)
		}
		if digests[i], err = decodeDigest(raw[(3*i+2)*sha256Len:(3*i+3)*sha256Len], j.RequestDigest); err != nil {
			return nil, fmt.Errorf("insert jobs: request digest: %w", err)
		}
		if l := j.Lineage; l != nil {
			sources[i] = pgtype.UUID{Bytes: l.SourceJobID, Valid: true}
			roots[i] = pgtype.UUID{Bytes: l.RootJobID, Valid: true}
			generations[i] = pgtype.Int4{Int32: int32(l.Generation), Valid: true}
		}
		priorities[i] = DefaultPriority
		if j.Priority != 0 {
			if j.Priority < HighestPriority || j.Priority > LowestPriority {
				return nil, fmt.Errorf("insert jobs: priority %d outside %d..%d", j.Priority, HighestPriority, LowestPriority)
			}
			priorities[i] = int64(j.Priority)
		}
		if !j.NotBefore.IsZero() {
			notBefores[i] = pgtype.Timestamptz{Time: j.NotBefore, Valid: true}
		}
		if j.SubmitTraceparent != "" {
			if traceparents == nil {
				traceparents = make([]pgtype.Text, n)
			}
			traceparents[i] = pgtype.Text{String: j.SubmitTraceparent, Valid: true}
		}
	}
	args := []any{ids, kinds, scopes, keys, digests, payloads, attempts, sources, roots, generations, priorities, notBefores}
	sql, first := stmts.plain, stmts.plainFirst
	if traceparents != nil {
		args = append(args, traceparents)
		sql, first = stmts.traced, stmts.tracedFirst
	}
	created := make(map[uuid.UUID]Job, n)
	run := func(sql string) error {
		rows, err := db.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		var id pgtype.UUID // binary, as in scanJob
		var priority int64
		var notBefore pgtype.Timestamptz
		for rows.Next() {
			var j Job
			if err := rows.Scan(&id, &j.Status, &j.AttemptCount, &j.CreatedAt, &j.UpdatedAt,
				&priority, &j.AvailableAt, &notBefore); err != nil {
				return fmt.Errorf("scan: %w", err)
			}
			j.JobID, j.Priority = id.Bytes, int(priority)
			if notBefore.Valid {
				j.NotBefore = notBefore.Time
			}
			created[j.JobID] = j
		}
		return rows.Err()
	}
	_, inTx := db.(pgx.Tx)
	plainFirst := !inTx
	if plainFirst && conflictFreeInserts.Load() > 0 {
		conflictFreeInserts.Add(-1)
		plainFirst = false
	}
	var err error
	if plainFirst {
		if err = run(first); IsUniqueViolation(err, "") {
			conflictFreeInserts.Store(conflictCooldown)
			clear(created)
			err = run(sql)
		}
	} else {
		err = run(sql)
	}
	if err != nil {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	type pair struct{ scope, key string }
	var missScopes, missKeys [][]byte
	for i := range jobs {
		if j, ok := created[uuid.UUID(ids[i])]; ok {
			// The rest of the row is what this call wrote.
			j.Kind, j.RequestDigest = jobs[i].Kind, jobs[i].RequestDigest
			if l := jobs[i].Lineage; l != nil {
				lineage := *l
				j.Lineage = &lineage
			}
			out[i] = Inserted{Job: j, Created: true}
			continue
		}
		missScopes, missKeys = append(missScopes, scopes[i]), append(missKeys, keys[i])
	}
	if len(missScopes) == 0 {
		return out, nil
	}
	rows, err := db.Query(ctx, existingJobsSQL, missScopes, missKeys)
	if err != nil {
		return nil, fmt.Errorf("read existing jobs: %w", err)
	}
	existing := make(map[pair]Job, len(missScopes))
	for rows.Next() {
		var scope, key []byte
		j, err := scanScheduledJob(rows, &scope, &key)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("read existing jobs: scan: %w", err)
		}
		existing[pair{string(scope), string(key)}] = j
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read existing jobs: %w", err)
	}
	for i := range jobs {
		if out[i].Created {
			continue
		}
		j, ok := existing[pair{string(scopes[i]), string(keys[i])}]
		if !ok {
			// Another transaction inserted and then lost the row (rolled back
			// or pruned) between our two statements; the caller may retry.
			return nil, fmt.Errorf("insert jobs: %w", ErrConflictVanished)
		}
		// Our own id: an earlier call with these JobIDs committed this job.
		out[i] = Inserted{Job: j, Created: j.JobID == uuid.UUID(ids[i])}
	}
	return out, nil
}

// GetJob returns the job jobID if it belongs to principalScopeHash, and
// ErrNotFound otherwise (absent and foreign jobs are indistinguishable). A
// chunked job's Progress is read by a second statement, only for that kind
// (AttachProgress).
func GetJob(ctx context.Context, db DBTX, principalScopeHash string, jobID uuid.UUID) (Job, error) {
	row := db.QueryRow(ctx, `SELECT `+scheduleColumns+`, `+jobColumns+` FROM etl_job_records j
		WHERE j.job_record_id = $1 AND j.principal_scope_hash = decode($2, 'hex')`, jobID, principalScopeHash)
	j, err := scanScheduledJob(row)
	if IsNoRows(err) {
		return Job{}, ErrNotFound
	}
	if err != nil {
		return Job{}, fmt.Errorf("get job: %w", err)
	}
	if j.Kind == KindETLChunked {
		jobs := []Job{j}
		if err := AttachProgress(ctx, db, jobs); err != nil {
			return Job{}, fmt.Errorf("get job: %w", err)
		}
		j = jobs[0]
	}
	return j, nil
}

// Statement names for database spans (never the SQL text).
func init() {
	tracing.RegisterStatement("jobs.insert", insertJobsSQL)
	tracing.RegisterStatement("jobs.insert_traced", insertTracedJobsSQL)
	tracing.RegisterStatement("jobs.insert_unannounced", insertJobsUnannouncedSQL)
	tracing.RegisterStatement("jobs.insert_traced_unannounced", insertTracedJobsUnannouncedSQL)
	for name, st := range map[string]insertStatements{"": announcedInserts, "_unannounced": unannouncedInserts} {
		tracing.RegisterStatement("jobs.insert_plain"+name, st.plainFirst)
		tracing.RegisterStatement("jobs.insert_traced_plain"+name, st.tracedFirst)
	}
	tracing.RegisterStatement("jobs.existing", existingJobsSQL)
	tracing.RegisterStatement("jobs.cancel", cancelSQL)
}

// sha256Len is the byte length of the identity digests (etl_sha256_digest).
const sha256Len = 32

// errDigestFormat is a digest that is not 64 lowercase hex characters.
var errDigestFormat = errors.New("not 64 lowercase hex characters")

// decodeDigest decodes the 64-character lowercase hex digest h into dst (32
// bytes) and returns dst. Uppercase is refused as the former text domain
// refused it, so one digest has exactly one accepted spelling.
func decodeDigest(dst []byte, h string) ([]byte, error) {
	if len(h) != 2*sha256Len {
		return nil, errDigestFormat
	}
	// By hand: lowercase only, and neither a lowercased copy nor a []byte
	// copy of h (both were visible in the continuous bench's profile).
	for i := range sha256Len {
		hi, lo := lowerHexValue(h[2*i]), lowerHexValue(h[2*i+1])
		if hi > 15 || lo > 15 {
			return nil, errDigestFormat
		}
		dst[i] = hi<<4 | lo
	}
	return dst, nil
}

// lowerHexValue is the value of a lowercase hex digit, 255 for any other byte.
func lowerHexValue(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return 255
}
