package pg

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The maintenance leadership of migration 00022 (internal/maintenance,
// docs/operations/maintenance.md): one row of etl_maintenance_leader per
// maintenance role, held by one process at a time until its expires_at
// (database clock). Every statement here is a single statement or a short
// transaction with no session state (no advisory lock, no prepared
// statement name, no SET outside a transaction), so all of it works through
// a pooler in transaction mode.

// ErrNotLeader means the caller's leadership term is over: its row expired
// or carries another token (another process took it). A fenced batch that
// returns it deleted nothing.
var ErrNotLeader = errors.New("maintenance leadership not held")

// LeaderTerm is one term of a maintenance leadership: the row's name, the
// holder's id and the token that term wrote. The zero value holds nothing.
type LeaderTerm struct {
	Name   string
	Holder string
	Token  uuid.UUID
}

// takeLeadershipSQL takes the leadership named $1 for holder $2 with the
// fresh token $3 for $4 microseconds of the database clock, in one
// conditional statement: it inserts the row when there is none, and
// replaces it only when the current term has expired (clock_timestamp(),
// never a process clock) or is the caller's own (a process restarted under
// the same holder id; its old term's batches, if any still ran, fail their
// fence on the new token). A row that another holder keeps alive is left
// alone and nothing is returned.
//
// Locks: the live CTE reads the row without a lock, so an attempt against
// a term that is live by the last committed renewal returns at once,
// without touching the row. Otherwise the conflict path locks the row; a
// fenced batch of the current holder holds that lock until it commits, so
// the take waits for the batch and then re-reads the row (READ COMMITTED
// re-check of ON CONFLICT DO UPDATE), where it finds the term the batch's
// fence extended, and takes nothing. A take never overlaps a batch.
const takeLeadershipSQL = `
WITH live AS (
    SELECT 1 FROM etl_maintenance_leader
    WHERE leader_name = $1 AND holder_id <> $2 AND expires_at >= clock_timestamp()
)
INSERT INTO etl_maintenance_leader AS l (leader_name, holder_id, leader_token, elected_at, expires_at)
SELECT $1, $2, $3, clock_timestamp(), clock_timestamp() + $4::bigint * interval '1 microsecond'
WHERE NOT EXISTS (SELECT 1 FROM live)
ON CONFLICT (leader_name) DO UPDATE
SET holder_id = excluded.holder_id, leader_token = excluded.leader_token,
    elected_at = excluded.elected_at, expires_at = excluded.expires_at
WHERE l.expires_at < clock_timestamp() OR l.holder_id = excluded.holder_id
RETURNING leader_token`

// renewLeadershipSQL extends the term ($1 name, $2 holder, $3 token) by $4
// microseconds from now (database clock). The token decides, not the
// expiry: a row that still carries this term's token was never taken by
// anyone else, so renewing it after it lapsed is as safe as before.
const renewLeadershipSQL = `
UPDATE etl_maintenance_leader
SET expires_at = clock_timestamp() + $4::bigint * interval '1 microsecond'
WHERE leader_name = $1 AND holder_id = $2 AND leader_token = $3`

// fenceLeadershipSQL is the first statement of every fenced batch's
// transaction: it extends the term like renewLeadershipSQL, but only while
// the term has not expired (database clock). Zero rows: the term is over
// (expired, or another token is there) and the batch must not delete. The
// row lock it takes is held until the batch commits, so no other process
// can take the leadership while the batch runs; one that tries waits, and
// after the commit finds the row renewed.
const fenceLeadershipSQL = `
UPDATE etl_maintenance_leader
SET expires_at = clock_timestamp() + $4::bigint * interval '1 microsecond'
WHERE leader_name = $1 AND holder_id = $2 AND leader_token = $3
  AND expires_at > clock_timestamp()`

// maintenanceSettingsSQL sets, for the batch's transaction only
// (set_config's is_local: through a pooler too), the statement timeout $1
// (whole milliseconds; "" keeps the session's) and the planner's defaults: the
// worker's execution pool pins index plans (PoolOptions.PinnedPlans:
// sequential scans, sorts and hash joins priced out, generic plans), which
// suits the lease statements but would turn prune's scans of a table
// without a window index into full index scans.
const maintenanceSettingsSQL = `
SELECT set_config('statement_timeout', coalesce(nullif($1::text, ''), current_setting('statement_timeout')), true),
       set_config('plan_cache_mode', 'auto', true),
       set_config('enable_seqscan', 'on', true), set_config('enable_bitmapscan', 'on', true),
       set_config('enable_hashjoin', 'on', true), set_config('enable_mergejoin', 'on', true),
       set_config('enable_sort', 'on', true)`

// maintenanceStatementTimeout is statement_timeout's value for d: whole
// milliseconds (at least 1), or "" (keep the session's) when d is not
// positive.
func maintenanceStatementTimeout(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return strconv.FormatInt(max(d.Milliseconds(), 1), 10)
}

// resignLeadershipSQL deletes the term's row, so another process takes the
// leadership at its next attempt instead of after the expiry.
const resignLeadershipSQL = `
DELETE FROM etl_maintenance_leader WHERE leader_name = $1 AND holder_id = $2 AND leader_token = $3`

// TakeLeadership tries to take the leadership name for holder for ttl
// (database clock), with a fresh token: it succeeds when nobody holds it,
// the current term expired, or holder already held it (a new term then
// begins). held reports whether it succeeded; term is zero when not. ttl
// must be at least a millisecond.
func TakeLeadership(ctx context.Context, db DBTX, name, holder string, ttl time.Duration) (term LeaderTerm, held bool, err error) {
	if ttl < time.Millisecond {
		return LeaderTerm{}, false, fmt.Errorf("take leadership: term %s below 1ms", ttl)
	}
	token := uuid.New()
	var got uuid.UUID
	err = db.QueryRow(ctx, takeLeadershipSQL, name, holder, token, ttl.Microseconds()).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return LeaderTerm{}, false, nil
	}
	if err != nil {
		return LeaderTerm{}, false, fmt.Errorf("take leadership: %w", err)
	}
	return LeaderTerm{Name: name, Holder: holder, Token: got}, true, nil
}

// RenewLeadership extends term by ttl from now (database clock) and
// reports whether term is still held (false: another process took the row,
// or it was deleted). ttl must be at least a millisecond.
func RenewLeadership(ctx context.Context, db DBTX, term LeaderTerm, ttl time.Duration) (bool, error) {
	if ttl < time.Millisecond {
		return false, fmt.Errorf("renew leadership: term %s below 1ms", ttl)
	}
	tag, err := db.Exec(ctx, renewLeadershipSQL, term.Name, term.Holder, term.Token, ttl.Microseconds())
	if err != nil {
		return false, fmt.Errorf("renew leadership: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// ResignLeadership ends term by deleting its row, if it is still term's.
func ResignLeadership(ctx context.Context, db DBTX, term LeaderTerm) error {
	if _, err := db.Exec(ctx, resignLeadershipSQL, term.Name, term.Holder, term.Token); err != nil {
		return fmt.Errorf("resign leadership: %w", err)
	}
	return nil
}

// PruneKind names one part of retention; each is a metric label value
// (internal/metrics) and one PruneFenced call.
type PruneKind string

// The parts of retention, in the order `etlctl prune` runs them.
const (
	PruneKindTerminalJobs PruneKind = "terminal_jobs"
	PruneKindLedger       PruneKind = "ledger"
	PruneKindOrphanQueue  PruneKind = "orphan_queue"
	PruneKindOutbox       PruneKind = "outbox"
	PruneKindAudit        PruneKind = "audit"
	// The chunked-job kinds (prune_chunked.go): no window, each statement
	// in bounded batches.
	//
	// PruneKindChunkedQueue: etl_chunked_job_queue rows of terminal or
	// pruned jobs.
	PruneKindChunkedQueue PruneKind = "chunked_queue"
	// PruneKindDiscardedLoadRows: target rows (processed_data) of loads
	// whose job is FAILED, CANCELLED or pruned, after marking each such
	// load DISCARDED (counted: the rows).
	PruneKindDiscardedLoadRows PruneKind = "discarded_load_rows"
	// PruneKindBadRecords: bad-record rows of pruned jobs.
	PruneKindBadRecords PruneKind = "bad_records"
	// PruneKindChunkedLoads: load rows of pruned jobs, once no bad record
	// and (unless VISIBLE) no target row of theirs is left.
	PruneKindChunkedLoads PruneKind = "chunked_loads"
	// PruneKindExpiredUploads: OPEN uploads past their expires_at.
	PruneKindExpiredUploads PruneKind = "expired_uploads"
	// PruneKindTerminalUploads: SUBMITTED uploads of terminal or pruned
	// jobs.
	PruneKindTerminalUploads PruneKind = "terminal_uploads"
	// PruneKindUploadParts: part rows of pruned uploads.
	PruneKindUploadParts PruneKind = "upload_parts"
	// PruneKindUploadChunks: chunk rows of pruned uploads, and of attempts
	// no part row points at in uploads past their expires_at.
	PruneKindUploadChunks PruneKind = "upload_chunks"
)

// PruneKinds lists every PruneKind in run order. The chunked kinds come
// after terminal_jobs (a job pruned there leaves its load, bad records
// and upload to them in the same run) and in dependency order: a load row
// goes after its bad records and target rows, parts after their upload,
// chunks after their part rows.
var PruneKinds = append([]PruneKind{PruneKindTerminalJobs, PruneKindLedger, PruneKindOrphanQueue, PruneKindOutbox, PruneKindAudit},
	ChunkedPruneKinds...)

// ChunkedPruneKinds lists the chunked-job kinds (PruneChunked) in run
// order: the tail of PruneKinds.
var ChunkedPruneKinds = []PruneKind{PruneKindChunkedQueue, PruneKindDiscardedLoadRows, PruneKindBadRecords, PruneKindChunkedLoads,
	PruneKindExpiredUploads, PruneKindTerminalUploads, PruneKindUploadParts, PruneKindUploadChunks}

// FencedPrune is one part of retention run under a maintenance leadership.
type FencedPrune struct {
	// Term is the leadership every batch re-checks.
	Term LeaderTerm
	// TTL is how far each batch's fence extends the term (database clock).
	TTL time.Duration
	// StatementTimeout, when positive, bounds each statement of a batch's
	// transaction (set per transaction, so it holds through a pooler);
	// zero keeps the pool's. Each batch also restores the planner's defaults
	// (maintenanceSettingsSQL).
	StatementTimeout time.Duration
}

// Prune deletes the rows of kind older than olderThan (database clock) as
// `etlctl prune` does (the same statements: PruneTerminalJobs, PruneLedger,
// PruneOrphanQueueRows, PruneOutbox, PruneOperatorAudit, PruneChunked), in
// batches of at most limit rows, each batch in a READ COMMITTED transaction of its own
// whose first statement is the fence: it extends f.Term by f.TTL while the
// term is unexpired and still carries f.Term.Token, and holds the
// leadership row's lock until the batch commits. When the fence finds the
// term over, that batch deletes nothing and Prune returns what earlier
// batches deleted with an error wrapping ErrNotLeader. olderThan is
// ignored for PruneKindOrphanQueue (one statement, no window) and the
// chunked kinds (no window); for every other kind it must be positive.
// limit must be at least 1.
func (f FencedPrune) Prune(ctx context.Context, db TxStarter, kind PruneKind, olderThan time.Duration, limit int) (int64, error) {
	exec := func(ctx context.Context, sql string, args ...any) (tag pgconn.CommandTag, err error) {
		err = WithTx(ctx, readCommittedBeginner{db}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, maintenanceSettingsSQL, maintenanceStatementTimeout(f.StatementTimeout)); err != nil {
				return err
			}
			fence, err := tx.Exec(ctx, fenceLeadershipSQL, f.Term.Name, f.Term.Holder, f.Term.Token, f.TTL.Microseconds())
			if err != nil {
				return err
			}
			if fence.RowsAffected() != 1 {
				return ErrNotLeader
			}
			tag, err = tx.Exec(ctx, sql, args...)
			return err
		})
		return tag, err
	}
	if f.TTL < time.Millisecond {
		return 0, fmt.Errorf("prune %s: term %s below 1ms", kind, f.TTL)
	}
	if isChunkedKind(kind) {
		return pruneChunked(ctx, exec, kind, limit)
	}
	switch kind {
	case PruneKindTerminalJobs:
		return pruneBatches(ctx, exec, "prune terminal jobs", pruneTerminalJobsSQL, olderThan, limit)
	case PruneKindLedger:
		return pruneBatches(ctx, exec, "prune ledger", pruneLedgerSQL, olderThan, limit)
	case PruneKindOutbox:
		return pruneBatches(ctx, exec, "prune outbox", pruneOutboxSQL, olderThan, limit)
	case PruneKindAudit:
		return pruneBatches(ctx, exec, "prune operator audit", pruneOperatorAuditSQL, olderThan, limit)
	case PruneKindOrphanQueue:
		tag, err := exec(ctx, pruneOrphanQueueRowsSQL)
		if err != nil {
			return 0, fmt.Errorf("prune orphan queue rows: %w", err)
		}
		return tag.RowsAffected(), nil
	}
	return 0, fmt.Errorf("prune: unknown kind %q", kind)
}
