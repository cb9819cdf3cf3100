package lease

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/tracing"
)

// ErrLost reports that a fenced write affected zero rows: the lease expired,
// was superseded by a newer claim, or the job was cancelled or finished. The
// caller no longer owns the job and must not retry the write.
var ErrLost = errors.New("lease lost")

// Ref is the exact identity of one lease: the only thing a worker presents to
// renew or finish a job. It carries no payload and no tenant data.
type Ref struct {
	JobID   uuid.UUID
	ClaimID uuid.UUID
	OwnerID string
}

// Claim is one job a worker has claimed.
type Claim struct {
	Ref
	// Kind is the job kind ("etl_records" or "diagnostic").
	Kind string
	// FencingToken is strictly greater than that of every earlier claim of any job.
	FencingToken int64
	// ExpiresAt is the lease expiry by the database clock.
	ExpiresAt time.Time
	// Attempt is this claim's attempt number, 1-based.
	Attempt int
	// MaxAttempts is fixed per job at insert.
	MaxAttempts int
	// Payload is the exact submitted text and RequestDigest its SHA-256 hex.
	Payload       string
	RequestDigest string
	// PickupDelay is how long the job was claimable before this claim, by the
	// database clock (available_at, or the expiry of the previous lease).
	PickupDelay time.Duration
	// SubmitTraceparent is the W3C traceparent the submit stored
	// (submit_traceparent), empty when it was not traced.
	SubmitTraceparent string
}

// ClaimParams are the inputs of Claim.
type ClaimParams struct {
	// OwnerID is the claiming worker's id; it must match [A-Za-z0-9._:-]{8,128}.
	OwnerID string
	// Limit is the most jobs to claim (the worker's free slots); must be ≥ 1.
	Limit int
	// LeaseDuration is added to the database clock to form lease_expires_at.
	LeaseDuration time.Duration
	// Owners, when above 0, claims fairly across owners (fairClaimSQL,
	// migration 00025): up to Owners owners are served by one claim, each
	// with its weighted share of the limit, by priority within it, and a
	// sixteenth of the limit (on average) goes to the oldest claimable jobs
	// of any owner. 0 claims first-come first-served (claimSQL).
	Owners int
}

// ClaimResult is what one Claim call did.
type ClaimResult struct {
	// Claimed are the jobs now leased to the caller, oldest eligible first.
	Claimed []Claim
	// Exhausted counts expired leases on their last attempt that this call
	// moved to FAILED codes.WorkerAttemptsExhausted instead of claiming.
	Exhausted int
}

// claimSQL takes up to $1 jobs in one statement.
//
// Candidates come from etl_job_claim_queue (migration 00005) alone, walked
// along its eligibility index in (claimable_at, job_record_id) order up to
// (SELECT clock_timestamp()): an init-plan evaluated once per statement, so
// the index is range-scanned up to "now" and the claim reads O(batch) entries
// whatever the table size. The candidates' job rows are then read by primary
// key (= ANY of the candidate ids). Neither step joins two tables, so no
// plan can trade the index walk for a hash join over a whole table (with a
// join, stale statistics can make the planner hash-join a sequential scan of
// etl_job_records into every claim).
//
// The queue row is only a hint: each candidate is re-checked on its
// etl_job_records row (PENDING and available, or RUNNING with an expired
// lease, by the database clock), which stays the authority.
//
// Locks: the candidates' queue rows, then their job rows, both FOR UPDATE
// SKIP LOCKED: concurrent claimers never take the same job and the claim
// never waits, so it can never be part of a lock cycle with the writers that
// lock the job row first and the queue row second (finish, retry, fail,
// release, renewal, cancellation). A candidate whose job row is held, or no
// longer claimable, is skipped this round (its queue row lock ends with the
// statement). A job row changed since the statement's snapshot is re-checked
// on its newest version (EvalPlanQual). Each picked job carries whether it
// is exhausted (read under its row lock), so each UPDATE touches only its
// own share.
//
// Plans: every write below selects its rows with "= ANY(ARRAY(SELECT ...))"
// over a CTE and joins nothing, so each is one index scan with sorted array
// keys, linear in the batch under any plan. (A join of a CTE with a table
// lets the planner put a whole-array condition on the inner side of a nested
// loop, which is quadratic in the batch.) The pickup delay is computed
// at pick time and returned in rows of its own, in candidate order, matched
// by job id in Go, which also returns the claims in that order.
//
// The updates of the picked job rows find them by the ctid their lock
// returned (a TID scan) instead of a second primary-key descent per job
// (docs/performance.md has what each costs). The lock returns the row's
// newest version; when another transaction changed the row after this
// statement's snapshot and before the lock, that version is invisible to
// the snapshot and the TID scan passes it by: the job is not claimed this
// round, and neither its job row nor its queue row is written
// (TestClaimSkipsARowChangedAfterItsSnapshot). Under the lock nothing can
// move the row, so a ctid names exactly the row that was picked.
//
// Writes: the job row's update changes no indexed column (HOT). The queue row
// of a claimed job moves to "now + lease", evaluated after the job rows were
// updated, so it is never earlier than lease_expires_at (later by the
// statement's remaining run time at most); an exhausted job leaves the queue.
const claimSQL = `
WITH candidates AS (
    SELECT q.job_record_id,
           (extract(epoch FROM clock_timestamp() - q.claimable_at) * 1000000)::bigint AS pickup_micros
    FROM etl_job_claim_queue q
    WHERE q.claimable_at <= (SELECT clock_timestamp())
    ORDER BY q.claimable_at, q.job_record_id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT j.ctid, j.job_record_id,
           (j.job_status = 'RUNNING' AND j.attempt_count >= j.max_attempts) AS exhausted
    FROM etl_job_records j
    WHERE j.job_record_id = ANY(ARRAY(SELECT job_record_id FROM candidates))
      AND ((j.job_status = 'PENDING' AND j.available_at <= (SELECT clock_timestamp()))
        OR (j.job_status = 'RUNNING' AND j.lease_expires_at <= (SELECT clock_timestamp())))
    FOR UPDATE SKIP LOCKED
), exhausted AS (
    UPDATE etl_job_records j
    SET job_status = 'FAILED',
        failure_code = '` + codes.WorkerAttemptsExhausted + `',
        request_payload = NULL,
        lease_claim_id = NULL, lease_owner_id = NULL,
        lease_expires_at = NULL, lease_fencing_token = NULL,
        updated_at = clock_timestamp()
    WHERE j.ctid = ANY(ARRAY(SELECT ctid FROM picked WHERE exhausted))
      AND j.job_status = 'RUNNING' AND j.attempt_count >= j.max_attempts
    RETURNING j.job_record_id, j.attempt_count
), exhausted_dequeued AS (
    DELETE FROM etl_job_claim_queue q
    WHERE q.job_record_id = ANY(ARRAY(SELECT job_record_id FROM exhausted))
), exhausted_events AS (
    INSERT INTO etl_outbox_events (event_kind, job_record_id, job_status, attempt_count, event_code)
    SELECT 'job_lifecycle', job_record_id, 'FAILED', attempt_count, '` + codes.WorkerAttemptsExhausted + `'
    FROM exhausted
), claimed AS (
    UPDATE etl_job_records j
    SET job_status = 'RUNNING',
        attempt_count = j.attempt_count + 1,
        lease_claim_id = gen_random_uuid(),
        lease_owner_id = $2,
        lease_expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond',
        lease_fencing_token = nextval('etl_lease_fencing_token_sequence'),
        updated_at = clock_timestamp()
    WHERE j.ctid = ANY(ARRAY(SELECT ctid FROM picked WHERE NOT exhausted))
      AND NOT (j.job_status = 'RUNNING' AND j.attempt_count >= j.max_attempts)
    RETURNING j.job_record_id, j.job_kind, j.lease_claim_id, j.lease_fencing_token,
              j.lease_expires_at, j.attempt_count, j.max_attempts,
              j.request_payload, j.request_digest, j.submit_traceparent
), requeued AS (
    UPDATE etl_job_claim_queue q
    SET claimable_at = clock_timestamp() + $3::bigint * interval '1 microsecond'
    WHERE q.job_record_id = ANY(ARRAY(SELECT job_record_id FROM claimed))
)
SELECT 1, job_record_id, job_kind, lease_claim_id, lease_fencing_token, lease_expires_at,
       attempt_count, max_attempts, request_payload, request_digest, NULL::bigint, submit_traceparent
FROM claimed
UNION ALL
SELECT 2, job_record_id, NULL, NULL, NULL, NULL, attempt_count, NULL, NULL, NULL, NULL, NULL
FROM exhausted
UNION ALL
SELECT 3, job_record_id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, pickup_micros, NULL
FROM candidates`

// ClaimJobs claims up to p.Limit eligible jobs for p.OwnerID in one statement:
// PENDING jobs whose available_at has passed and RUNNING jobs whose lease has
// expired, oldest eligible first. Expired leases on their last attempt become
// FAILED codes.WorkerAttemptsExhausted in the same statement. Each claimed job
// gets a fresh claim id, a new fencing token and attempt_count + 1.
func ClaimJobs(ctx context.Context, db pg.DBTX, p ClaimParams) (ClaimResult, error) {
	return claimJobs(ctx, db, claimSQL, p)
}

// claimJobs runs the claim statement sql (claimSQL; tests pass it with a
// barrier injected) and reads its rows.
func claimJobs(ctx context.Context, db pg.DBTX, sql string, p ClaimParams) (ClaimResult, error) {
	if p.Limit < 1 {
		return ClaimResult{}, nil
	}
	args := []any{p.Limit, p.OwnerID, p.LeaseDuration.Microseconds()}
	if p.Owners > 0 && sql == claimSQL {
		sql = fairClaimSQL
		args = append(args, p.Owners, oldestShare(p.Limit))
	}
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return ClaimResult{}, fmt.Errorf("claim jobs: %w", err)
	}
	defer rows.Close()
	var res ClaimResult
	// The claimed rows by job id, and the candidates in their order (oldest
	// eligible first) with their pickup delays.
	type candidate struct {
		id           uuid.UUID
		pickupMicros int64
	}
	var claimed []Claim
	claimedAt := make(map[uuid.UUID]int)
	var candidates []candidate
	// pgtype values decode binary columns in place: scanning into uuid.UUID
	// (a sql.Scanner) went through each id's text form, and the pointers
	// allocated per column, a fifth of the worker's CPU in the burndown.
	var (
		rowKind                    int32
		jobID, claimID             pgtype.UUID
		kind, payload, traceparent pgtype.Text
		digest                     pgtype.DriverBytes // request_digest, 32 bytes (migration 00014)
		token, pickupMicros        pgtype.Int8
		expires                    pgtype.Timestamptz
		attempt, maxAttempts       pgtype.Int4
	)
	for rows.Next() {
		if err := rows.Scan(&rowKind, &jobID, &kind, &claimID, &token, &expires,
			&attempt, &maxAttempts, &payload, &digest, &pickupMicros, &traceparent); err != nil {
			return ClaimResult{}, fmt.Errorf("claim jobs: scan: %w", err)
		}
		id := uuid.UUID(jobID.Bytes)
		switch rowKind {
		case 1:
			c := Claim{Ref: Ref{JobID: id, ClaimID: uuid.UUID(claimID.Bytes), OwnerID: p.OwnerID},
				Kind: kind.String, FencingToken: token.Int64, ExpiresAt: expires.Time,
				Attempt: int(attempt.Int32), MaxAttempts: int(maxAttempts.Int32),
				Payload: payload.String, RequestDigest: hex.EncodeToString(digest)}
			if traceparent.Valid {
				c.SubmitTraceparent = traceparent.String
			}
			claimedAt[id] = len(claimed)
			claimed = append(claimed, c)
		case 2:
			res.Exhausted++
		case 3:
			candidates = append(candidates, candidate{id, pickupMicros.Int64})
		}
	}
	if err := rows.Err(); err != nil {
		return ClaimResult{}, fmt.Errorf("claim jobs: %w", err)
	}
	if len(claimed) == 0 {
		return res, nil
	}
	// Oldest eligible first: the claimed jobs in the order of the candidates
	// (every claimed job is one; a walk, not a sort of the claims).
	res.Claimed = make([]Claim, 0, len(claimed))
	for _, cd := range candidates {
		i, ok := claimedAt[cd.id]
		if !ok {
			continue
		}
		delete(claimedAt, cd.id)
		c := claimed[i]
		c.PickupDelay = time.Duration(max(cd.pickupMicros, 0)) * time.Microsecond
		res.Claimed = append(res.Claimed, c)
	}
	// Every claimed job is a candidate by construction of the statement;
	// were one not, it is still held and must still be returned.
	for _, c := range claimed {
		if _, left := claimedAt[c.JobID]; left {
			res.Claimed = append(res.Claimed, c)
		}
	}
	return res, nil
}

// exactLease is the whole exact lease predicate (design.md invariant 2) for
// statements that take $1 job id, $2 claim id, $3 owner id.
const exactLease = `job_record_id = $1
      AND job_status = 'RUNNING'
      AND lease_claim_id = $2
      AND lease_owner_id = $3
      AND lease_expires_at > clock_timestamp()`

// exactLeases is the FROM and WHERE of a batched fenced write of the job
// rows aliased j: the whole exact lease (design.md invariant 2) of each
// presented pair of $1 job ids and $2 claim ids, all of owner $3.
const exactLeases = `    FROM ` + presentedPairs + `
    WHERE ` + exactPairMatch

// presentedPairs are the presented (job id, claim id) pairs, aliased c.
const presentedPairs = `unnest($1::uuid[], $2::uuid[]) AS c(job_record_id, lease_claim_id)`

// exactPairMatch is the whole exact lease of job row j for its pair c.
const exactPairMatch = `j.job_record_id = c.job_record_id
      AND j.job_status = 'RUNNING'
      AND j.lease_claim_id = c.lease_claim_id
      AND j.lease_owner_id = $3
      AND j.lease_expires_at > clock_timestamp()`

// renewSQL extends many exact live leases at once. It only ever matches rows
// that are RUNNING under the exact claim and owner with an unexpired lease
// (database clock), so it cannot create, revive or transfer a claim. GREATEST
// keeps it from ever shortening a lease. updated_at is deliberately left alone:
// a renewal is not a state change a poller should see.
//
// The claim-queue row follows the new expiry in the same statement (never
// earlier than it), so the claim's eligibility index never offers a renewed
// lease as expired.
//
// Plan: the exact pairs come from unnest, which the planner sees as the
// batch's size, so it probes the primary key once per pair (nested loop with
// unnest outside) or hashes both sides: linear either way. An extra
// "job_record_id = ANY($1)" would make it expect one job row and loop over
// the whole unnest per row, quadratic in the batch (measured).
//
// Locks: the exact leases are locked FOR UPDATE SKIP LOCKED before they are
// extended, so renewal never waits on a row another transaction holds: the
// worker's own finish transaction (which locks its won rows until commit),
// a cancellation, a claimer looking at an expiring lease. A presented lease
// whose row was skipped, but which the statement's snapshot still shows as
// the exact live lease, comes back busy: not renewed this time, not lost.
// (The snapshot read returns every live lease; Renew tells the busy ones
// from the renewed ones by claim id, which keeps the statement linear.)
// The renewal pool also runs with a short lock_timeout, so the queue-row
// update cannot wait long either (internal/worker.OpenPools).
const renewSQL = `
WITH locked AS (
    SELECT j.job_record_id
    FROM etl_job_records j, ` + presentedPairs + `
    WHERE ` + exactPairMatch + `
    FOR UPDATE OF j SKIP LOCKED
), renewed AS (
    UPDATE etl_job_records j
    SET lease_expires_at = GREATEST(j.lease_expires_at, clock_timestamp() + $4::bigint * interval '1 microsecond')
    WHERE j.job_record_id = ANY(ARRAY(SELECT job_record_id FROM locked))
      AND j.job_status = 'RUNNING'
      AND j.lease_owner_id = $3
      AND j.lease_expires_at > clock_timestamp()
    RETURNING j.job_record_id, j.lease_claim_id, j.lease_expires_at
), requeued AS (
    UPDATE etl_job_claim_queue q
    SET claimable_at = GREATEST(q.claimable_at, clock_timestamp() + $4::bigint * interval '1 microsecond')
    WHERE q.job_record_id = ANY(ARRAY(SELECT job_record_id FROM renewed))
), busy AS (
    SELECT c.lease_claim_id
    FROM etl_job_records j, ` + presentedPairs + `
    WHERE ` + exactPairMatch + `
)
SELECT lease_claim_id, lease_expires_at FROM renewed
UNION ALL
SELECT lease_claim_id, NULL FROM busy`

// Renewal is the result for one presented claim.
type Renewal struct {
	Ref
	// Renewed is false when the claim is lost (stale, expired, cancelled,
	// finished or superseded), or busy.
	Renewed bool
	// Busy: not renewed because another transaction held the job row
	// locked, though the statement's snapshot still showed the exact live
	// lease. Neither renewed nor lost: ask again.
	Busy bool
	// ExpiresAt is the new database expiry when Renewed.
	ExpiresAt time.Time
}

// Renew extends the exact live leases of refs, all of one owner, by duration
// from the database's current time, in one statement. It returns one Renewal
// per ref, in order. An error means nothing is known: the caller must not
// treat any claim as renewed.
func Renew(ctx context.Context, db pg.DBTX, ownerID string, refs []Ref, duration time.Duration) ([]Renewal, error) {
	out := make([]Renewal, len(refs))
	if len(refs) == 0 {
		return out, nil
	}
	ids, claims, err := refArrays(ownerID, refs)
	if err != nil {
		return nil, fmt.Errorf("renew leases: %w", err)
	}
	for i, r := range refs {
		out[i].Ref = r
	}
	rows, err := db.Query(ctx, renewSQL, ids, claims, ownerID, duration.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("renew leases: %w", err)
	}
	defer rows.Close()
	// Keyed by claim id: a worker may present two claims of one job (an old,
	// superseded one and the current one); only the matching claim renewed.
	renewed := make(map[uuid.UUID]*time.Time, len(refs))
	for rows.Next() {
		var claim uuid.UUID
		var exp *time.Time
		if err := rows.Scan(&claim, &exp); err != nil {
			return nil, fmt.Errorf("renew leases: scan: %w", err)
		}
		if exp != nil || renewed[claim] == nil {
			renewed[claim] = exp
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("renew leases: %w", err)
	}
	for i := range out {
		exp, ok := renewed[out[i].ClaimID]
		switch {
		case ok && exp != nil:
			out[i].Renewed, out[i].ExpiresAt = true, *exp
		case ok:
			out[i].Busy = true
		}
	}
	return out, nil
}

// errForeignClaim: a batch presented a claim of another owner; batched
// statements take one owner so a worker can only ever act on its own leases.
var errForeignClaim = errors.New("claim of another owner presented")

// refArrays splits refs, all of ownerID, into parallel job and claim id
// arrays. They are [16]byte, which pgx encodes as binary uuid directly
// (uuid.UUID would go through its driver.Valuer text form: measured at about
// a tenth of the worker's CPU in the burndown).
func refArrays(ownerID string, refs []Ref) (ids, claims [][16]byte, err error) {
	ids, claims = make([][16]byte, len(refs)), make([][16]byte, len(refs))
	for i, r := range refs {
		if r.OwnerID != ownerID {
			return nil, nil, errForeignClaim
		}
		ids[i], claims[i] = r.JobID, r.ClaimID
	}
	return ids, claims, nil
}

// Won is a job whose fenced success matched its exact lease.
type Won struct {
	JobID uuid.UUID
	// ClaimID is the claim that won: of two claims of one job presented
	// together (an old, superseded one and the current one) only one can.
	ClaimID uuid.UUID
	Attempt int
}

// succeedSQL moves every presented exact live lease to SUCCEEDED, clearing
// payload and lease, removes the jobs from the claim queue and writes one
// lifecycle outbox group row for all the jobs that won (one event per job
// once the relay expands it). Each job is decided by its own exact
// predicate; rows not matched are simply absent from the result. The UPDATE
// locks the won rows until the caller's transaction ends, so a concurrent
// cancel waits and then finds them SUCCEEDED. Lock order: job rows, then
// queue rows, as every writer but the (never waiting) claim. Plans: as
// renewSQL's.
const succeedSQL = `
WITH won AS (
    UPDATE etl_job_records j
    SET job_status = 'SUCCEEDED',
        request_payload = NULL,
        lease_claim_id = NULL, lease_owner_id = NULL,
        lease_expires_at = NULL, lease_fencing_token = NULL,
        updated_at = clock_timestamp()
` + exactLeases + `
    RETURNING j.job_record_id, c.lease_claim_id, j.attempt_count
), dequeued AS (
    DELETE FROM etl_job_claim_queue q
    WHERE q.job_record_id = ANY(ARRAY(SELECT job_record_id FROM won))
), events AS (
    -- One outbox row for the whole group (migration 00006); the relay
    -- expands it into one event per job. Both array_agg calls read the rows
    -- of one aggregation pass in the same order, so the arrays are parallel.
    INSERT INTO etl_outbox_events (event_kind, job_status, job_record_ids, attempt_counts)
    SELECT 'job_lifecycle', 'SUCCEEDED', array_agg(job_record_id), array_agg(attempt_count)
    FROM won
    HAVING count(*) > 0
)
SELECT job_record_id, lease_claim_id, attempt_count FROM won`

// Succeed applies the fenced terminal success of refs (all of ownerID) inside
// the caller's transaction tx and returns the jobs that won, in no particular
// order. A ref missing from the result lost its lease: the caller must write
// no target row for it. Run it before the target writes so the won rows are
// locked and the live set is known; commit only after them.
func Succeed(ctx context.Context, tx pg.DBTX, ownerID string, refs []Ref) ([]Won, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	ids, claims, err := refArrays(ownerID, refs)
	if err != nil {
		return nil, fmt.Errorf("succeed jobs: %w", err)
	}
	rows, err := tx.Query(ctx, succeedSQL, ids, claims, ownerID)
	if err != nil {
		return nil, fmt.Errorf("succeed jobs: %w", err)
	}
	defer rows.Close()
	var won []Won
	var jobID, claimID pgtype.UUID // binary, as in ClaimJobs
	var attempt int32
	for rows.Next() {
		if err := rows.Scan(&jobID, &claimID, &attempt); err != nil {
			return nil, fmt.Errorf("succeed jobs: scan: %w", err)
		}
		won = append(won, Won{JobID: jobID.Bytes, ClaimID: claimID.Bytes, Attempt: int(attempt)})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("succeed jobs: %w", err)
	}
	return won, nil
}

// requeueMoved is the CTE that moves the claim-queue row of a job the
// statement's "moved" CTE returned to PENDING to its new available_at.
//
// The job's owner (migration 00025) becomes due by the job's new time if it
// was due later (the claims may have found it empty and backed off), so the
// requeued job is not kept waiting behind that backoff. This may wait for a
// claim that holds the owner's row (for the length of its statement); claims
// never wait on the job row this statement holds, so no cycle.
const requeueMoved = `requeued AS (
    UPDATE etl_job_claim_queue q SET claimable_at = m.available_at
    FROM moved m
    WHERE q.job_record_id = m.job_record_id AND q.job_record_id = $1
    RETURNING q.owner_slot, q.claimable_at
), owner_due AS (
    UPDATE etl_claim_owners o
    SET due_at = r.claimable_at, idle_visits = 0, updated_at = clock_timestamp()
    FROM requeued r
    WHERE o.owner_slot = r.owner_slot AND o.due_at > r.claimable_at
)`

// retrySQL puts an exact live lease back to PENDING, available again at the
// database's current time plus $4 microseconds, and announces it.
const retrySQL = `
WITH moved AS (
    UPDATE etl_job_records
    SET job_status = 'PENDING',
        available_at = clock_timestamp() + $4::bigint * interval '1 microsecond',
        lease_claim_id = NULL, lease_owner_id = NULL,
        lease_expires_at = NULL, lease_fencing_token = NULL,
        updated_at = clock_timestamp()
    WHERE ` + exactLease + `
      AND attempt_count < max_attempts
    RETURNING job_record_id, attempt_count, available_at
), ` + requeueMoved + `, events AS (
    INSERT INTO etl_outbox_events (event_kind, job_record_id, job_status, attempt_count)
    SELECT 'job_available', job_record_id, 'PENDING', attempt_count FROM moved
)
SELECT job_record_id FROM moved`

// Retry returns the job of an exact live lease to PENDING, claimable again
// after backoff (database clock). The attempt stays charged. It returns
// ErrLost when the lease did not match or no attempt is left (the caller
// should Fail instead when Attempt == MaxAttempts).
func Retry(ctx context.Context, db pg.DBTX, ref Ref, backoff time.Duration) error {
	return execFenced(ctx, db, "retry job", retrySQL, ref, backoff.Microseconds())
}

// failSQL moves an exact live lease to FAILED with code $4 and announces it.
const failSQL = `
WITH moved AS (
    UPDATE etl_job_records
    SET job_status = 'FAILED',
        failure_code = $4,
        request_payload = NULL,
        lease_claim_id = NULL, lease_owner_id = NULL,
        lease_expires_at = NULL, lease_fencing_token = NULL,
        updated_at = clock_timestamp()
    WHERE ` + exactLease + `
    RETURNING job_record_id, attempt_count
), dequeued AS (
    DELETE FROM etl_job_claim_queue q USING moved m
    WHERE q.job_record_id = m.job_record_id AND q.job_record_id = $1
), events AS (
    INSERT INTO etl_outbox_events (event_kind, job_record_id, job_status, attempt_count, event_code)
    SELECT 'job_lifecycle', job_record_id, 'FAILED', attempt_count, $4 FROM moved
)
SELECT job_record_id FROM moved`

// Fail moves the job of an exact live lease to FAILED with the stable
// failure code (format ^[a-z][a-z0-9_]{2,127}$). It returns ErrLost when the
// lease did not match.
func Fail(ctx context.Context, db pg.DBTX, ref Ref, code string) error {
	return execFenced(ctx, db, "fail job", failSQL, ref, code)
}

// releaseSQL hands an exact live lease back at once without charging the
// attempt (graceful shutdown) and announces the job as available.
const releaseSQL = `
WITH moved AS (
    UPDATE etl_job_records
    SET job_status = 'PENDING',
        attempt_count = attempt_count - 1,
        available_at = clock_timestamp(),
        lease_claim_id = NULL, lease_owner_id = NULL,
        lease_expires_at = NULL, lease_fencing_token = NULL,
        updated_at = clock_timestamp()
    WHERE ` + exactLease + `
    RETURNING job_record_id, attempt_count, available_at
), ` + requeueMoved + `, events AS (
    INSERT INTO etl_outbox_events (event_kind, job_record_id, job_status, attempt_count)
    SELECT 'job_available', job_record_id, 'PENDING', attempt_count FROM moved
)
SELECT job_record_id FROM moved`

// Release returns the job of an exact live lease to PENDING, available now,
// with the attempt not charged. Used on shutdown for work that did not
// finish. It returns ErrLost when the lease did not match.
func Release(ctx context.Context, db pg.DBTX, ref Ref) error {
	return execFenced(ctx, db, "release job", releaseSQL, ref)
}

func execFenced(ctx context.Context, db pg.DBTX, what, sql string, ref Ref, extra ...any) error {
	args := append([]any{ref.JobID, ref.ClaimID, ref.OwnerID}, extra...)
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if n == 0 {
		return ErrLost
	}
	return nil
}

// LostState is what a worker reads after losing a lease, to classify the loss.
type LostState struct {
	// Status is the job's current status.
	Status string
	// SinceCancelled is the database time elapsed since the job was cancelled
	// (only when Status is CANCELLED).
	SinceCancelled time.Duration
}

// InspectLost reads the state of a job whose lease the caller lost. It
// returns pg.ErrNotFound when the job does not exist any more.
func InspectLost(ctx context.Context, db pg.DBTX, jobID uuid.UUID) (LostState, error) {
	var st LostState
	var micros *int64
	err := db.QueryRow(ctx, `SELECT job_status,
		(extract(epoch FROM clock_timestamp() - job_cancelled_at) * 1000000)::bigint
		FROM etl_job_records WHERE job_record_id = $1`, jobID).Scan(&st.Status, &micros)
	if pg.IsNoRows(err) {
		return st, pg.ErrNotFound
	}
	if err != nil {
		return st, fmt.Errorf("inspect lost job: %w", err)
	}
	if micros != nil {
		st.SinceCancelled = time.Duration(*micros) * time.Microsecond
	}
	return st, nil
}

// SucceededAt reports whether job jobID is SUCCEEDED at attempt attempt.
// Every claim counts one more attempt, so for the caller's own claim's
// attempt that means its own success committed: the check of a worker whose
// success write committed without the answer reaching it, and whose retry
// matched nothing (ErrLost).
func SucceededAt(ctx context.Context, db pg.DBTX, jobID uuid.UUID, attempt int) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM etl_job_records
		WHERE job_record_id = $1 AND job_status = 'SUCCEEDED' AND attempt_count = $2)`, jobID, attempt).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("read job outcome: %w", err)
	}
	return ok, nil
}

// Statement names for database spans (never the SQL text).
func init() {
	tracing.RegisterStatement("lease.claim", claimSQL)
	tracing.RegisterStatement("lease.renew", renewSQL)
	tracing.RegisterStatement("lease.succeed", succeedSQL)
	tracing.RegisterStatement("lease.retry", retrySQL)
	tracing.RegisterStatement("lease.fail", failSQL)
	tracing.RegisterStatement("lease.release", releaseSQL)
}
