package pg

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/codes"
)

// The operator console's reads and its cancellation (issue 14). Every read
// is bounded whatever the size of etl_job_records:
//   - the active set (PENDING, RUNNING) is read through etl_job_claim_queue,
//     the narrow table that holds one row per active job, at most
//     OpsActiveCap rows (etl_ops_active_jobs, migration 00010);
//   - the job list walks the primary key newest first (job ids are UUIDv7,
//     so id order is creation order) and examines at most
//     OpsListParams.ScanLimit rows per page;
//   - a job's detail is primary-key lookups and the partial lineage indexes.
//
// Lease columns and the payload are read only through the SECURITY DEFINER
// functions of migration 00010, so the intake role keeps its column grants.

// OpsActiveCap is the most active jobs one console read visits.
const OpsActiveCap = 10000

// OpsOwnerPrefixLen is how many hex characters of principal_scope_hash the
// console shows as a job's owner.
const OpsOwnerPrefixLen = 8

// OpsJob is a job as an operator sees it: no payload, no key, no principal;
// the owner is a short prefix of its principal scope hash.
type OpsJob struct {
	JobID            uuid.UUID
	Kind             string
	Status           string
	Owner            string
	AttemptCount     int
	MaxAttempts      int
	FailureCode      *string
	CancellationCode *string
	CreatedAt        time.Time
	UpdatedAt        time.Time
	AvailableAt      time.Time
	// Priority is the job's priority, 1 (highest) .. 4 (migration 00025).
	Priority int
}

const opsJobColumns = `j.job_record_id, j.job_kind, j.job_status, left(encode(j.principal_scope_hash, 'hex'), 8), j.attempt_count, ` +
	`j.max_attempts, j.failure_code::text, j.cancellation_code, j.created_at, j.updated_at, j.available_at, j.job_priority`

func scanOpsJob(row scanner, extra ...any) (OpsJob, error) {
	var j OpsJob
	dest := append(extra, &j.JobID, &j.Kind, &j.Status, &j.Owner, &j.AttemptCount, &j.MaxAttempts,
		&j.FailureCode, &j.CancellationCode, &j.CreatedAt, &j.UpdatedAt, &j.AvailableAt, &j.Priority)
	return j, row.Scan(dest...)
}

// OpsListParams filter the operator's job list. Zero fields do not filter.
type OpsListParams struct {
	Status      string
	Kind        string
	FailureCode string
	// Priority keeps the jobs of that priority (1..4); 0 keeps every one.
	Priority int
	// From and To bound created_at (From inclusive, To exclusive).
	From, To time.Time
	// Before continues the list after that job id (keyset, newest first).
	Before *uuid.UUID
	// Limit is the page size (1..500).
	Limit int
	// ScanLimit bounds the rows examined for one page (default 5000); a
	// page that examined that many rows without filling up ends there and
	// says so (OpsPage.Next set, OpsPage.Scanned).
	ScanLimit int
}

// OpsPage is one page of the operator's job list.
type OpsPage struct {
	Jobs []OpsJob
	// Next is the keyset position of the next page; nil at the end.
	Next *uuid.UUID
	// Scanned is how many rows this page examined.
	Scanned int
	// Capped is true when the page stopped at ScanLimit (or OpsActiveCap)
	// before filling up: more matches may follow.
	Capped bool
}

// uuidV7Floor is the smallest UUID whose UUIDv7 timestamp is t (the version
// and variant bits zero): every UUIDv7 of t or later sorts at or after it.
func uuidV7Floor(t time.Time) uuid.UUID {
	var u uuid.UUID
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(max(0, t.UnixMilli())))
	copy(u[:6], b[2:])
	return u
}

// opsListSQL walks the primary key newest first from $1 (exclusive) down
// to $2 (inclusive), examines at most $3 rows, and returns the ones that
// match the filters (at most $4), each with the count and the smallest id of
// the examined rows. Bounded: O($3) index entries and heap rows whatever the
// table size.
const opsListSQL = `
WITH scanned AS MATERIALIZED (
    SELECT ` + opsJobColumns + `
    FROM etl_job_records j
    WHERE j.job_record_id < $1 AND j.job_record_id >= $2
    ORDER BY j.job_record_id DESC
    LIMIT $3
), stats AS (
    -- min(uuid) exists only from PostgreSQL 16 on.
    SELECT count(*) AS examined,
           (SELECT s.job_record_id FROM scanned s ORDER BY s.job_record_id LIMIT 1) AS last_id
    FROM scanned
), hits AS (
    SELECT * FROM scanned s
    WHERE ($5 = '' OR s.job_status = $5)
      AND ($6 = '' OR s.job_kind = $6)
      AND ($7 = '' OR s.failure_code = $7 OR s.cancellation_code = $7)
      AND s.created_at >= $8 AND s.created_at < $9
      AND ($10 = 0 OR s.job_priority = $10)
    ORDER BY s.job_record_id DESC
    LIMIT $4
)
SELECT stats.examined, stats.last_id, h.*
FROM stats LEFT JOIN hits h ON true
ORDER BY h.job_record_id DESC`

// maxUUID sorts after every UUID.
var maxUUID = uuid.UUID{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// OpsListJobs returns one page of every owner's jobs, newest first (by job
// id). PENDING and RUNNING filters read the active set through the claim
// queue (at most OpsActiveCap jobs); any other filter walks the primary key
// and examines at most p.ScanLimit rows.
func OpsListJobs(ctx context.Context, db DBTX, p OpsListParams) (OpsPage, error) {
	if p.Limit < 1 || p.Limit > 500 {
		return OpsPage{}, fmt.Errorf("ops list jobs: limit %d outside 1..500", p.Limit)
	}
	if p.Priority < 0 || p.Priority > 4 {
		return OpsPage{}, fmt.Errorf("ops list jobs: priority %d outside 1..4", p.Priority)
	}
	if p.ScanLimit <= 0 {
		p.ScanLimit = 5000
	}
	if p.Status == StatusPending || p.Status == StatusRunning {
		from, to := timeBounds(p)
		return opsListActive(ctx, db, p, from, to)
	}
	rows, err := db.Query(ctx, opsListSQL, opsListArgs(p)...)
	if err != nil {
		return OpsPage{}, fmt.Errorf("ops list jobs: %w", err)
	}
	defer rows.Close()
	var page OpsPage
	var lastID *uuid.UUID
	for rows.Next() {
		var (
			id                                  *uuid.UUID
			kind, status, owner                 *string
			attempts, maxAttempts               *int
			failure, cancellation               *string
			createdAt, updatedAt, availableTime *time.Time
			priority                            *int
		)
		if err := rows.Scan(&page.Scanned, &lastID, &id, &kind, &status, &owner, &attempts, &maxAttempts,
			&failure, &cancellation, &createdAt, &updatedAt, &availableTime, &priority); err != nil {
			return OpsPage{}, fmt.Errorf("ops list jobs: scan: %w", err)
		}
		if id == nil {
			continue
		}
		page.Jobs = append(page.Jobs, OpsJob{JobID: *id, Kind: *kind, Status: *status, Owner: *owner,
			AttemptCount: *attempts, MaxAttempts: *maxAttempts, FailureCode: failure, CancellationCode: cancellation,
			CreatedAt: *createdAt, UpdatedAt: *updatedAt, AvailableAt: *availableTime, Priority: *priority})
	}
	if err := rows.Err(); err != nil {
		return OpsPage{}, fmt.Errorf("ops list jobs: %w", err)
	}
	switch {
	case len(page.Jobs) == p.Limit:
		next := page.Jobs[len(page.Jobs)-1].JobID
		page.Next = &next
	case page.Scanned == p.ScanLimit && lastID != nil:
		page.Next, page.Capped = lastID, true
	}
	return page, nil
}

// timeBounds is p's created_at range with open ends filled in.
func timeBounds(p OpsListParams) (time.Time, time.Time) {
	from, to := p.From, p.To
	if from.IsZero() {
		from = time.Unix(0, 0)
	}
	if to.IsZero() {
		to = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return from, to
}

// opsListArgs are opsListSQL's arguments for p: the id range from the time
// range and the keyset position, the bounds and the filters.
func opsListArgs(p OpsListParams) []any {
	if p.ScanLimit <= 0 {
		p.ScanLimit = 5000
	}
	from, to := timeBounds(p)
	upper := maxUUID
	if !p.To.IsZero() {
		// Ids of jobs created before To: below the floor of To's
		// millisecond + 1 (the created_at recheck trims the rest).
		upper = uuidV7Floor(p.To.Add(time.Millisecond))
	}
	if p.Before != nil && bytesLess(*p.Before, upper) {
		upper = *p.Before
	}
	lower := uuid.UUID{}
	if !p.From.IsZero() {
		lower = uuidV7Floor(p.From)
	}
	return []any{upper, lower, p.ScanLimit, p.Limit, p.Status, p.Kind, p.FailureCode, from, to, p.Priority}
}

func bytesLess(a, b uuid.UUID) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// ActiveJob is a PENDING or RUNNING job with its claim-queue time and lease.
type ActiveJob struct {
	OpsJob
	// ClaimableAt is available_at while PENDING, the lease expiry while RUNNING.
	ClaimableAt    time.Time
	LeaseOwnerID   *string
	LeaseExpiresAt *time.Time
}

const activeJobsSQL = `
SELECT a.job_record_id, a.job_kind, a.job_status, left(a.principal_scope_hash, 8), a.attempt_count,
       a.max_attempts, a.claimable_at, a.lease_owner_id, a.lease_expires_at, a.created_at, clock_timestamp(),
       0::bigint
FROM etl_ops_active_jobs($1) a`

// activePrioritiesSQL is activeJobsSQL with each job's priority, one
// primary-key lookup per active job (the intake's column grant), for the
// job list's PENDING and RUNNING filters.
var activePrioritiesSQL = strings.Replace(activeJobsSQL, "0::bigint",
	"(SELECT j.job_priority FROM etl_job_records j WHERE j.job_record_id = a.job_record_id)", 1)

// OpsActiveJobs returns up to OpsActiveCap PENDING and RUNNING jobs (in
// claimable order), the database clock at the read, and whether the cap cut
// the set short. Their Priority is not read (zero).
func OpsActiveJobs(ctx context.Context, db DBTX) ([]ActiveJob, time.Time, bool, error) {
	return opsActiveJobs(ctx, db, activeJobsSQL)
}

func opsActiveJobs(ctx context.Context, db DBTX, sql string) ([]ActiveJob, time.Time, bool, error) {
	rows, err := db.Query(ctx, sql, OpsActiveCap+1)
	if err != nil {
		return nil, time.Time{}, false, fmt.Errorf("ops active jobs: %w", err)
	}
	defer rows.Close()
	var out []ActiveJob
	var now time.Time
	for rows.Next() {
		var a ActiveJob
		var priority *int
		if err := rows.Scan(&a.JobID, &a.Kind, &a.Status, &a.Owner, &a.AttemptCount, &a.MaxAttempts,
			&a.ClaimableAt, &a.LeaseOwnerID, &a.LeaseExpiresAt, &a.CreatedAt, &now, &priority); err != nil {
			return nil, time.Time{}, false, fmt.Errorf("ops active jobs: scan: %w", err)
		}
		if priority != nil {
			a.Priority = *priority
		}
		if a.Status == StatusPending {
			a.AvailableAt = a.ClaimableAt
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, false, fmt.Errorf("ops active jobs: %w", err)
	}
	capped := len(out) > OpsActiveCap
	if capped {
		out = out[:OpsActiveCap]
	}
	if now.IsZero() {
		if err := db.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
			return nil, time.Time{}, false, fmt.Errorf("ops active jobs: clock: %w", err)
		}
	}
	return out, now, capped, nil
}

func opsListActive(ctx context.Context, db DBTX, p OpsListParams, from, to time.Time) (OpsPage, error) {
	active, _, capped, err := opsActiveJobs(ctx, db, activePrioritiesSQL)
	if err != nil {
		return OpsPage{}, err
	}
	sort.Slice(active, func(i, k int) bool { return bytesLess(active[k].JobID, active[i].JobID) })
	page := OpsPage{Scanned: len(active), Capped: capped}
	for _, a := range active {
		switch {
		case a.Status != p.Status, p.Kind != "" && a.Kind != p.Kind, p.FailureCode != "",
			p.Priority != 0 && a.Priority != p.Priority,
			a.CreatedAt.Before(from), !a.CreatedAt.Before(to),
			p.Before != nil && !bytesLess(a.JobID, *p.Before):
			continue
		}
		if len(page.Jobs) == p.Limit {
			next := page.Jobs[len(page.Jobs)-1].JobID
			page.Next = &next
			break
		}
		page.Jobs = append(page.Jobs, a.OpsJob)
	}
	return page, nil
}

// OpsDetail is one job as the console's detail page shows it.
type OpsDetail struct {
	OpsJob
	// RequestDigest is the stored SHA-256 of the request body (32 bytes).
	// It is never shown as is: a low-entropy payload could be confirmed
	// from it offline; the console shows only a keyed tag of it.
	RequestDigest []byte
	Lineage       *Lineage
	// Lease columns, set while RUNNING.
	LeaseOwnerID      *string
	LeaseExpiresAt    *time.Time
	LeaseFencingToken *int64
	// RecordCount is the payload's record count, known while the job holds
	// a payload (PENDING, RUNNING).
	RecordCount *int
	// DatabaseNow is the database clock at the read.
	DatabaseNow time.Time
	// Children are replays of this job (at most 20), oldest first.
	Children []OpsJob
}

const opsDetailSQL = `
SELECT j.request_digest, j.replay_source_job_record_id, j.replay_root_job_record_id,
       j.replay_generation_count, p.lease_owner_id, p.lease_expires_at, p.lease_fencing_token,
       p.record_count, p.database_now, ` + opsJobColumns + `
FROM etl_job_records j, etl_ops_job_private(j.job_record_id) p
WHERE j.job_record_id = $1`

// opsChildrenSQL reads replays of one job over etl_job_replay_source_lookup_index.
const opsChildrenSQL = `SELECT ` + opsJobColumns + `
FROM etl_job_records j WHERE j.replay_source_job_record_id = $1
ORDER BY j.job_record_id LIMIT 20`

// OpsJobDetail reads one job of any owner; ErrNotFound when absent.
func OpsJobDetail(ctx context.Context, db DBTX, id uuid.UUID) (OpsDetail, error) {
	var d OpsDetail
	var source, root *uuid.UUID
	var generation *int32
	var count *int32
	j, err := scanOpsJob(db.QueryRow(ctx, opsDetailSQL, id), &d.RequestDigest, &source, &root, &generation,
		&d.LeaseOwnerID, &d.LeaseExpiresAt, &d.LeaseFencingToken, &count, &d.DatabaseNow)
	if IsNoRows(err) {
		return OpsDetail{}, ErrNotFound
	}
	if err != nil {
		return OpsDetail{}, fmt.Errorf("ops job detail: %w", err)
	}
	d.OpsJob = j
	if count != nil {
		n := int(*count)
		d.RecordCount = &n
	}
	if source != nil && root != nil && generation != nil {
		d.Lineage = &Lineage{SourceJobID: *source, RootJobID: *root, Generation: int(*generation)}
	}
	rows, err := db.Query(ctx, opsChildrenSQL, id)
	if err != nil {
		return OpsDetail{}, fmt.Errorf("ops job children: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		c, err := scanOpsJob(rows)
		if err != nil {
			return OpsDetail{}, fmt.Errorf("ops job children: scan: %w", err)
		}
		d.Children = append(d.Children, c)
	}
	if err := rows.Err(); err != nil {
		return OpsDetail{}, fmt.Errorf("ops job children: %w", err)
	}
	return d, nil
}

// OpsCounters are cumulative counters read in O(1).
type OpsCounters struct {
	// Claims is the number of claims ever made (the fencing sequence).
	Claims int64
	// Finishes is the number of terminal transitions of active jobs ever
	// made (claim-queue rows deleted, from the statistics collector; it
	// restarts at zero when statistics are reset).
	Finishes    int64
	DatabaseNow time.Time
}

// ReadOpsCounters reads the counters (etl_ops_counters, migration 00010).
func ReadOpsCounters(ctx context.Context, db DBTX) (OpsCounters, error) {
	var c OpsCounters
	var claims, finishes *int64
	if err := db.QueryRow(ctx, `SELECT claims_total, finishes_total, database_now FROM etl_ops_counters()`).
		Scan(&claims, &finishes, &c.DatabaseNow); err != nil {
		return OpsCounters{}, fmt.Errorf("read ops counters: %w", err)
	}
	if claims != nil {
		c.Claims = *claims
	}
	if finishes != nil {
		c.Finishes = *finishes
	}
	return c, nil
}

// OutboxBacklog is the outbox's pending rows by class, each counted up to a cap.
type OutboxBacklog struct {
	Lifecycle, Advisory int64
	OldestLifecycleAt   *time.Time
}

// ReadOutboxBacklog counts the outbox through its partial indexes, at most
// limit rows per class.
func ReadOutboxBacklog(ctx context.Context, db DBTX, limit int) (OutboxBacklog, error) {
	var b OutboxBacklog
	if err := db.QueryRow(ctx, `SELECT lifecycle_rows, advisory_rows, oldest_lifecycle_at FROM etl_ops_outbox_backlog($1)`, limit).
		Scan(&b.Lifecycle, &b.Advisory, &b.OldestLifecycleAt); err != nil {
		return OutboxBacklog{}, fmt.Errorf("read outbox backlog: %w", err)
	}
	return b, nil
}

// Outcome is a count of terminal jobs by state and code.
type Outcome struct {
	Status string
	Code   string
	Count  int
}

// recentOutcomesSQL counts terminal outcomes among the newest $2 jobs
// created since $1 (primary key walk from the top, bounded by $2) that
// finished since $1. See docs/console.md for why this is a sample.
const recentOutcomesSQL = `
SELECT s.job_status, COALESCE(s.failure_code::text, s.cancellation_code, ''), count(*), max(n.examined)
FROM (SELECT j.job_status, j.failure_code, j.cancellation_code, j.updated_at
      FROM etl_job_records j WHERE j.job_record_id >= $1
      ORDER BY j.job_record_id DESC LIMIT $2) s,
     (SELECT count(*) AS examined FROM (SELECT 1 FROM etl_job_records j
                                         WHERE j.job_record_id >= $1
                                         ORDER BY j.job_record_id DESC LIMIT $2) e) n
WHERE s.job_status IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND s.updated_at >= $3
GROUP BY 1, 2
ORDER BY 3 DESC, 1, 2`

// OpsRecentOutcomes counts terminal outcomes since since among the newest
// at most limit jobs created since since; capped is true when limit jobs
// were examined (older jobs that finished recently are then not counted).
func OpsRecentOutcomes(ctx context.Context, db DBTX, since time.Time, limit int) ([]Outcome, bool, error) {
	rows, err := db.Query(ctx, recentOutcomesSQL, uuidV7Floor(since), limit, since)
	if err != nil {
		return nil, false, fmt.Errorf("ops recent outcomes: %w", err)
	}
	defer rows.Close()
	var out []Outcome
	var examined int
	for rows.Next() {
		var o Outcome
		if err := rows.Scan(&o.Status, &o.Code, &o.Count, &examined); err != nil {
			return nil, false, fmt.Errorf("ops recent outcomes: scan: %w", err)
		}
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("ops recent outcomes: %w", err)
	}
	return out, examined >= limit, nil
}

// OperatorCancelParams identify one operator cancellation.
type OperatorCancelParams struct {
	JobID uuid.UUID
	// OperatorScopeHash is the operator's principal scope hash, recorded on
	// the lifecycle outbox rows.
	OperatorScopeHash string
	// CancellationKeyHash is stored as the row's cancellation_key_hash.
	CancellationKeyHash string
}

// OperatorCancelJob cancels any owner's PENDING or RUNNING job through
// etl_operator_cancel_job (migration 00010): the same lock, predicates and
// outbox rows as the owner's cancellation, code codes.CancelledByOperator.
// Cancelled is false when the job was not active (or is absent: ErrNotFound).
//
// Every call that returns nil or ErrNotFound writes one cancel row of the
// operator audit (migration 00020): a cancellation's row in the
// cancellation's own statement (operatorCancelAuditedSQL); when nothing was
// cancelled, a row whose outcome says why (cancelOutcomeCode), after the
// read of the job. Any other error may leave that second row unwritten.
func OperatorCancelJob(ctx context.Context, db DBTX, p OperatorCancelParams) (CancelOutcome, error) {
	var out CancelOutcome
	j, err := scanJob(db.QueryRow(ctx, operatorCancelAuditedSQL,
		p.JobID, p.OperatorScopeHash, p.CancellationKeyHash), &out.PreviousStatus)
	switch {
	case err == nil:
		out.Job, out.Cancelled = j, true
		return out, nil
	case !IsNoRows(err):
		return CancelOutcome{}, fmt.Errorf("operator cancel job: %w", err)
	}
	out.PreviousStatus = ""
	j, err = scanJob(db.QueryRow(ctx, `SELECT `+jobColumns+` FROM etl_job_records j WHERE j.job_record_id = $1`, p.JobID))
	if err != nil && !IsNoRows(err) {
		return CancelOutcome{}, fmt.Errorf("read operator cancelled job: %w", err)
	}
	found := err == nil
	outcome := codes.JobNotFound
	if found {
		outcome = cancelOutcomeCode(j)
	}
	if _, err := db.Exec(ctx, auditInsertSingleSQL, p.OperatorScopeHash, AuditActionCancel, p.JobID, outcome); err != nil {
		return CancelOutcome{}, fmt.Errorf("audit operator cancel: %w", err)
	}
	if !found {
		return CancelOutcome{}, ErrNotFound
	}
	out.Job = j
	return out, nil
}
