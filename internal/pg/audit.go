package pg

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/codes"
)

// The operator audit (migration 00020): one etl_operator_audit_records row
// per operator action, written by the action's own statement, so it commits
// with the action or not at all. Rows hold the operator's principal scope
// hash (the keyed hash the outbox's actor column holds), never a principal,
// key or payload; reads show a short prefix of the hash, as the console shows
// a job's owner.

// Audit actions (operator_action).
const (
	AuditActionCancel     = "cancel"
	AuditActionBulkCancel = "bulk_cancel"
	AuditActionReplay     = "replay"
)

// AuditOutcomeOK is the outcome of an action that did what it was asked;
// any other outcome is the code (internal/codes) of why it did nothing.
const AuditOutcomeOK = "ok"

// auditInsertSingleSQL records a cancel of $3 by the operator of hex scope
// hash $1 with outcome $4: the audit row of a cancellation that changed
// nothing (the job absent or already terminal), whose outcome the statement
// that read the job decided.
const auditInsertSingleSQL = `
INSERT INTO etl_operator_audit_records (operator_principal_scope_hash, operator_action, job_record_id, outcome_code)
VALUES (decode($1, 'hex'), $2, $3, $4)`

// operatorCancelAuditedSQL runs etl_operator_cancel_job (migration 00010:
// the job row's FOR UPDATE lock, the predicates, the claim-queue delete and
// the outbox rows) and, in the same statement, records the cancellation it
// made: a data-modifying CTE runs exactly once whether or not the outer
// query reads it, and it commits or rolls back with the cancellation.
const operatorCancelAuditedSQL = `
WITH cancelled AS (
    SELECT * FROM etl_operator_cancel_job($1, $2, $3)
), audit AS (
    INSERT INTO etl_operator_audit_records (operator_principal_scope_hash, operator_action, job_record_id, outcome_code)
    SELECT decode($2, 'hex'), '` + AuditActionCancel + `', c.job_record_id, '` + AuditOutcomeOK + `' FROM cancelled c
)
SELECT * FROM cancelled`

// cancelOutcomeCode is the audit outcome of a cancellation that found job
// j not active: why it did nothing.
func cancelOutcomeCode(j Job) string {
	switch {
	case j.Status == StatusSucceeded:
		return codes.AlreadySucceeded
	case j.Status == StatusFailed:
		return codes.AlreadyFailed
	case j.CancellationCode != nil:
		// Cancelled before: by its owner or an operator.
		return *j.CancellationCode
	}
	return codes.JobNotFound
}

// OperatorBulkCancelParams identify one operator bulk cancellation.
type OperatorBulkCancelParams struct {
	// JobIDs are the jobs to cancel (the plan the operator confirmed).
	JobIDs []uuid.UUID
	// CancellationKeyHashes[i] is JobIDs[i]'s cancellation_key_hash.
	CancellationKeyHashes []string
	// OperatorScopeHash is the operator's principal scope hash (hex).
	OperatorScopeHash string
	// Filter is the bulk filter as the audit records it: a JSON object of
	// the members state, kind, code, from, to and confirmed only (the
	// table's CHECK refuses any other), never a payload or principal.
	Filter json.RawMessage
}

// operatorBulkCancelSQL cancels every job of $1 (with key hash $3[i]) as
// the operator $2 through etl_operator_cancel_job, one call per job in
// array order, and records one bulk_cancel audit row with filter $4 and the
// number of jobs cancelled, all in one statement: the cancellations and
// their audit row commit together or not at all. Each call locks its job
// row (FOR UPDATE) until the statement's transaction ends; the caller sorts
// $1 by id so two bulk cancellations lock in the same order.
const operatorBulkCancelSQL = `
WITH cancelled AS (
    SELECT c.job_record_id
    FROM unnest($1::uuid[], $3::text[]) AS t(id, key_hash)
    CROSS JOIN LATERAL etl_operator_cancel_job(t.id, $2, t.key_hash) c
), audit AS (
    INSERT INTO etl_operator_audit_records (operator_principal_scope_hash, operator_action, bulk_filter, job_count,
                                            outcome_code)
    SELECT decode($2, 'hex'), '` + AuditActionBulkCancel + `', $4::jsonb, count(*), '` + AuditOutcomeOK + `'
    FROM cancelled
)
SELECT count(*) FROM cancelled`

// OperatorBulkCancelJobs cancels the PENDING and RUNNING jobs among
// p.JobIDs, of any owner, each as OperatorCancelJob would (code
// codes.CancelledByOperator), and writes one bulk_cancel audit row holding
// p.Filter and the number cancelled, in one statement: either every
// cancellation and the audit row commit, or none does (an error, including a
// deadlock, 40P01, leaves nothing; retry). Jobs absent or already terminal
// are skipped and not counted. It returns the number of jobs cancelled.
func OperatorBulkCancelJobs(ctx context.Context, db DBTX, p OperatorBulkCancelParams) (int, error) {
	if len(p.JobIDs) != len(p.CancellationKeyHashes) {
		return 0, fmt.Errorf("operator bulk cancel: %d jobs, %d key hashes", len(p.JobIDs), len(p.CancellationKeyHashes))
	}
	var n int
	if err := db.QueryRow(ctx, operatorBulkCancelSQL, p.JobIDs, p.OperatorScopeHash, p.CancellationKeyHashes,
		string(p.Filter)).Scan(&n); err != nil {
		return 0, fmt.Errorf("operator bulk cancel: %w", err)
	}
	return n, nil
}

// AuditRecord is one operator action as the audit shows it.
type AuditRecord struct {
	// ID is the record's position: larger ids are newer.
	ID int64
	// Operator is the first OpsOwnerPrefixLen hex characters of the
	// operator's principal scope hash.
	Operator string
	// Action is one of the AuditAction* constants.
	Action string
	// JobID is the job a cancel or replay acted on; nil for a bulk cancel.
	JobID *uuid.UUID
	// ReplayJobID is the job a replay created or found again.
	ReplayJobID *uuid.UUID
	// Filter is a bulk cancel's filter (a JSON object), nil otherwise.
	Filter json.RawMessage
	// JobCount is how many jobs a bulk cancel cancelled.
	JobCount *int
	// Outcome is AuditOutcomeOK or the code of why the action did nothing.
	Outcome string
	// CreatedAt is the database clock at the action.
	CreatedAt time.Time
}

// AuditListParams select one page of the audit, newest first.
type AuditListParams struct {
	// Before continues after that record id (keyset); zero starts at the
	// newest record.
	Before int64
	// Limit is the page size (1..500).
	Limit int
}

// AuditPage is one page of the audit, newest first.
type AuditPage struct {
	Records []AuditRecord
	// Next is the Before of the next page; zero at the end.
	Next int64
}

// auditListSQL reads at most $2 records with ids below $1, newest first: a
// backward walk of the primary key, O($2) whatever the table size.
const auditListSQL = `
SELECT a.audit_record_id, left(encode(a.operator_principal_scope_hash, 'hex'), 8), a.operator_action,
       a.job_record_id, a.replay_job_record_id, a.bulk_filter::text, a.job_count, a.outcome_code, a.created_at
FROM etl_operator_audit_records a
WHERE a.audit_record_id < $1
ORDER BY a.audit_record_id DESC
LIMIT $2`

// ListOperatorAudit returns one page of the operator audit, newest first.
func ListOperatorAudit(ctx context.Context, db DBTX, p AuditListParams) (AuditPage, error) {
	if p.Limit < 1 || p.Limit > 500 {
		return AuditPage{}, fmt.Errorf("list operator audit: limit %d outside 1..500", p.Limit)
	}
	before := p.Before
	if before <= 0 {
		before = math.MaxInt64
	}
	rows, err := db.Query(ctx, auditListSQL, before, p.Limit+1)
	if err != nil {
		return AuditPage{}, fmt.Errorf("list operator audit: %w", err)
	}
	defer rows.Close()
	var page AuditPage
	for rows.Next() {
		var r AuditRecord
		var filter *string
		if err := rows.Scan(&r.ID, &r.Operator, &r.Action, &r.JobID, &r.ReplayJobID, &filter, &r.JobCount,
			&r.Outcome, &r.CreatedAt); err != nil {
			return AuditPage{}, fmt.Errorf("list operator audit: scan: %w", err)
		}
		if filter != nil {
			r.Filter = json.RawMessage(*filter)
		}
		page.Records = append(page.Records, r)
	}
	if err := rows.Err(); err != nil {
		return AuditPage{}, fmt.Errorf("list operator audit: %w", err)
	}
	if len(page.Records) > p.Limit {
		page.Records = page.Records[:p.Limit]
		page.Next = page.Records[p.Limit-1].ID
	}
	return page, nil
}

// pruneOperatorAuditSQL deletes one batch of audit rows created more than
// $1 microseconds before the database clock, oldest first along
// etl_operator_audit_created_at_index. Lock: SKIP LOCKED, so two pruners
// never contend for one row (audit rows are never updated).
const pruneOperatorAuditSQL = `
WITH doomed AS (
    SELECT audit_record_id
    FROM etl_operator_audit_records
    WHERE created_at < clock_timestamp() - $1::bigint * interval '1 microsecond'
    ORDER BY created_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM etl_operator_audit_records a USING doomed d WHERE a.audit_record_id = d.audit_record_id`

// PruneOperatorAudit deletes operator audit rows created more than
// olderThan ago by the database clock, in batches of at most limit rows,
// until a batch comes up short, and returns how many it deleted (also when
// ctx ends or a batch fails part way). olderThan must be positive and limit
// at least 1. The role that runs it needs DELETE on the table, which of the
// roles of deploy/postgres/least-privilege.sql only the owner and
// mightyetl_maintenance_role (the worker fleet's elected retention) hold.
func PruneOperatorAudit(ctx context.Context, db DBTX, olderThan time.Duration, limit int) (int64, error) {
	return prune(ctx, db, "prune operator audit", pruneOperatorAuditSQL, olderThan, limit)
}
