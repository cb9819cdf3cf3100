package pg

import (
	"context"
	"fmt"

	"github.com/mightyetl/mightyetl/internal/tracing"
)

// Per-owner statements of issue 33: the intake's count of an owner's
// pending jobs (its quota) and the owners' claim weights (their share of a
// fair claim, internal/lease).

// countOwnerPendingSQL counts an owner's PENDING and RUNNING jobs, each
// part up to $3 rows, so the cost is bounded by the caller's limit
// whatever the owner has queued:
//   - jobs of the claim queue (one row per PENDING or RUNNING job) in the
//     owner's slot ($1, OwnerSlot): an index-only walk of the owner's
//     prefix of etl_job_claim_queue_owner_index (migration 00025), at most
//     $3 entries. The ORDER BY is a prefix of the index's order (not its
//     job_record_id, which the intake role may not read): it costs nothing
//     on the index and keeps the planner off a sequential scan, which for
//     an owner the statistics think owns most of the queue would otherwise
//     look cheaper (and read the whole table when they are wrong). Rows
//     queued without a slot (by intakes older than schema 25) are not seen;
//   - large (etl_chunked) jobs, never in the claim queue: the rows of
//     etl_chunked_job_queue (one per non-terminal chunked job, a few in
//     flight at any time) whose job is the owner's ($2, hex), each joined
//     to its job row by primary key.
//
// No lock, no snapshot beyond the statement's: a hint for admission, never
// an authority over a job.
const countOwnerPendingSQL = `
SELECT (SELECT count(*) FROM (
            SELECT 1 FROM etl_job_claim_queue q
            WHERE q.owner_slot = $1
            ORDER BY q.priority, q.claimable_at
            LIMIT $3) queued)
     + (SELECT count(*) FROM (
            SELECT 1 FROM etl_chunked_job_queue c
            JOIN etl_job_records j ON j.job_record_id = c.job_record_id
            WHERE j.principal_scope_hash = decode($2, 'hex')
            LIMIT $3) chunked)`

// CountOwnerPendingJobs returns how many PENDING and RUNNING jobs the owner
// principalScopeHash (hex) has, counting at most limit of its ordinary jobs
// and at most limit of its large jobs (so a result above limit means "more
// than limit"): see countOwnerPendingSQL. A limit below 1 counts nothing.
func CountOwnerPendingJobs(ctx context.Context, db DBTX, principalScopeHash string, limit int64) (int64, error) {
	if limit < 1 {
		return 0, nil
	}
	slot, ok := OwnerSlot(principalScopeHash)
	if !ok {
		return 0, fmt.Errorf("count owner pending jobs: principal scope hash is not 64 hex digits")
	}
	var n int64
	if err := db.QueryRow(ctx, countOwnerPendingSQL, slot, principalScopeHash, limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("count owner pending jobs: %w", err)
	}
	return n, nil
}

// MinOwnerWeight and MaxOwnerWeight bound an owner's claim weight
// (etl_claim_owners_weight_range_check, migration 00025); DefaultOwnerWeight
// is every owner's weight until one is set.
const (
	MinOwnerWeight     = 1
	MaxOwnerWeight     = 1000
	DefaultOwnerWeight = 1
)

// setOwnerWeightsSQL makes the given owner slots' weights ($1 slots, $2
// weights, one per slot) the weights of etl_claim_owners and resets every
// other owner's weight to 1, in one statement:
//   - a listed owner without a row gets one with due_at 'infinity' and no
//     idle visits: "no claimable work known", so claims never look at it
//     until a job insert makes it due (the insert's ON CONFLICT lowers
//     due_at to the job's claimable time); an existing row keeps its
//     schedule and only its weight changes (and only when it differs, so
//     an unchanged configuration writes nothing);
//   - an owner not listed whose weight is not 1 is reset to 1.
//
// The two parts touch disjoint rows. Each row written is locked until the
// statement commits: claims that serve the same owners (fairClaimSQL
// updates their due_at) wait for it, briefly (one row per owner, no scan of
// any job). The reset part reads the whole table: one row per owner that
// ever queued work, small beside the jobs.
const setOwnerWeightsSQL = `
WITH wanted AS (
    SELECT u.owner_slot, u.weight FROM unnest($1::bigint[], $2::bigint[]) AS u(owner_slot, weight)
), reset AS (
    UPDATE etl_claim_owners o
    SET weight = 1, updated_at = clock_timestamp()
    WHERE o.weight <> 1
      AND NOT EXISTS (SELECT 1 FROM wanted w WHERE w.owner_slot = o.owner_slot)
    RETURNING 1
), written AS (
    INSERT INTO etl_claim_owners AS o (owner_slot, due_at, idle_visits, weight)
    SELECT w.owner_slot, 'infinity', 0, w.weight FROM wanted w
    ON CONFLICT (owner_slot) DO UPDATE
    SET weight = excluded.weight, updated_at = clock_timestamp()
    WHERE o.weight <> excluded.weight
    RETURNING 1
)
SELECT (SELECT count(*) FROM written), (SELECT count(*) FROM reset)`

// OwnerWeight is one owner's claim weight.
type OwnerWeight struct {
	// PrincipalScopeHash is the owner's principal_scope_hash in hex.
	PrincipalScopeHash string
	// Weight is MinOwnerWeight..MaxOwnerWeight.
	Weight int
}

// SetOwnerWeights makes weights the claim weights of their owners and
// resets every other owner's weight to DefaultOwnerWeight, in one statement
// (setOwnerWeightsSQL). Owners sharing a slot (a 64-bit collision of their
// hashes) share a weight: the larger is kept. It returns how many owners'
// weights it set and how many it reset; an owner whose weight already had
// the wanted value counts in neither. A weight out of range or a hash that
// is not 64 hex digits is an error before any write.
func SetOwnerWeights(ctx context.Context, db DBTX, weights []OwnerWeight) (set, reset int64, err error) {
	bySlot := make(map[int64]int, len(weights))
	for _, w := range weights {
		slot, ok := OwnerSlot(w.PrincipalScopeHash)
		if !ok {
			return 0, 0, fmt.Errorf("set owner weights: principal scope hash is not 64 hex digits")
		}
		if w.Weight < MinOwnerWeight || w.Weight > MaxOwnerWeight {
			return 0, 0, fmt.Errorf("set owner weights: weight %d outside %d..%d", w.Weight, MinOwnerWeight, MaxOwnerWeight)
		}
		bySlot[slot] = max(bySlot[slot], w.Weight)
	}
	slots := make([]int64, 0, len(bySlot))
	values := make([]int64, 0, len(bySlot))
	for s, w := range bySlot {
		slots = append(slots, s)
		values = append(values, int64(w))
	}
	if err := db.QueryRow(ctx, setOwnerWeightsSQL, slots, values).Scan(&set, &reset); err != nil {
		return 0, 0, fmt.Errorf("set owner weights: %w", err)
	}
	return set, reset, nil
}

func init() {
	tracing.RegisterStatement("owners.count_pending", countOwnerPendingSQL)
	tracing.RegisterStatement("owners.set_weights", setOwnerWeightsSQL)
}
