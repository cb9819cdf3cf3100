package pg

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"
)

// The overview's claimable jobs by owner and priority (issue 33, item 5).
// Every read is bounded whatever the queue holds:
//   - the exact pass first counts at most OpsOwnersParams.ExactLimit + 1
//     claimable entries of etl_job_claim_queue's eligibility index (index
//     only: no queue row is read); when the claimable set fits, it reads
//     those rows (at most ExactLimit) and every count is exact;
//   - otherwise the counts are estimated from a page sample of the queue
//     (TABLESAMPLE SYSTEM over about OpsOwnersParams.SamplePages pages,
//     each count scaled by the inverse of the sampled fraction);
//   - the shown owners' oldest claimable times are exact whichever way the
//     counts were made: four descents (one per priority) of the queue's
//     owner index per shown owner;
//   - the owners' claim state is read from etl_claim_owners: the shown
//     owners by primary key, the totals over at most OpsOwnersParams.OwnersCap
//     rows, the longest-due owner from the head of its due index.
//
// No lock is taken and nothing is written: the counts are a view of the
// moment, never an authority over a job.

// Defaults of OpsOwnersParams.
const (
	// OpsOwnersExactLimit is the most claimable rows the exact pass reads.
	OpsOwnersExactLimit = 10000
	// OpsOwnersSamplePages is about how many queue pages the estimate reads
	// (256 pages of 8 KiB hold about 27,000 queue rows).
	OpsOwnersSamplePages = 256
	// OpsOwnersTop is how many owners the overview lists.
	OpsOwnersTop = 20
	// OpsOwnersCap bounds the rows of etl_claim_owners the totals count.
	OpsOwnersCap = 100000
)

// OpsOwnersParams bound OpsClaimableByOwner. Zero fields take the defaults
// above.
type OpsOwnersParams struct {
	// Now is the database clock at the read (the overview's): a row is
	// claimable when its claimable_at is not after it. Required.
	Now         time.Time
	ExactLimit  int
	SamplePages int
	Top         int
	OwnersCap   int
}

// Claim states of an owner (etl_claim_owners, migration 00025, and
// docs/architecture.md "Fair claiming across owners").
const (
	// OwnerDue: its due_at has passed; the next claims serve it, least
	// recently served first.
	OwnerDue = "due"
	// OwnerIdle: claims found none of its jobs claimable; they look again
	// at due_at (a backoff of 50 ms × 2^idle visits, at most 10 s, or its
	// earliest future job).
	OwnerIdle = "idle"
	// OwnerScheduled: its earliest job becomes claimable at due_at (a
	// scheduled job or a retry's backoff); claims were not found empty.
	OwnerScheduled = "scheduled"
	// OwnerParked: no queued job at all; only a new job makes it due.
	OwnerParked = "parked"
	// OwnerUnregistered: no row in etl_claim_owners (jobs queued by
	// binaries below level 3 have no owner slot and never show here).
	OwnerUnregistered = "unregistered"
)

// OwnerClaimable is one owner's claimable jobs and claim state.
type OwnerClaimable struct {
	// Slot is the owner slot (the first 8 bytes of the principal scope
	// hash); never shown.
	Slot int64
	// Owner is the first OpsOwnerPrefixLen hex characters of the principal
	// scope hash, as the job list shows an owner.
	Owner string
	// Claimable is the sum of ByPriority; ByPriority[i] counts priority
	// i+1. Estimates when ClaimableByOwner.Estimated.
	Claimable  int64
	ByPriority [4]int64
	// OldestClaimableAt is the claimable_at of its oldest claimable job
	// (exact); nil when it has none (an estimate can list an owner whose
	// sampled jobs were claimed since).
	OldestClaimableAt *time.Time
	// Weight, State, IdleVisits and DueAt are its etl_claim_owners row:
	// State is one of the Owner* states; DueAt is nil when parked or
	// unregistered.
	Weight     int
	State      string
	IdleVisits int
	DueAt      *time.Time
}

// ClaimOwnerTotals count the rows of etl_claim_owners by claim state.
type ClaimOwnerTotals struct {
	Owners, Due, Idle, Scheduled, Parked int64
	// Weighted counts owners whose weight is not DefaultOwnerWeight.
	Weighted int64
	// Capped is true when the table has more than OwnersCap rows (the
	// counts then cover OwnersCap + 1 of them, in no particular order).
	Capped bool
	// LongestDueAt is the earliest due_at of a due owner: the owner the
	// claims have left waiting longest. Nil when no owner is due.
	LongestDueAt *time.Time
}

// ClaimableByOwner is the claim queue's claimable jobs by owner and
// priority, and the owners' claim state.
type ClaimableByOwner struct {
	DatabaseNow time.Time
	// Estimated is true when more than ExactLimit jobs were claimable and
	// the counts come from a sample of SampledPercent of the queue's pages.
	Estimated      bool
	ExactLimit     int
	SampledPercent float64
	// Claimable and ByPriority count every claimable job (ByPriority[i]
	// priority i+1), those without an owner slot included.
	Claimable  int64
	ByPriority [4]int64
	// WithoutOwnerSlot counts claimable jobs queued without an owner slot
	// (by binaries below level 3, or before migration 00025); they are
	// claimed first-come first-served by every claim's oldest share.
	WithoutOwnerSlot int64
	// OwnersWithClaimable is how many owners have claimable jobs; when
	// Estimated, how many the sample saw (a lower bound).
	OwnersWithClaimable int64
	// Owners are the Top owners by claimable jobs, most first (then by
	// slot).
	Owners      []OwnerClaimable
	ClaimOwners ClaimOwnerTotals
}

// opsClaimableCountSQL counts at most $2 claimable entries of the claim
// queue's eligibility index (claimable_at up to $1): an index-only scan
// (heap visits only for pages not all-visible), bounded by the LIMIT.
const opsClaimableCountSQL = `
SELECT count(*) FROM (SELECT 1 FROM etl_job_claim_queue q
                      WHERE q.claimable_at <= $1
                      ORDER BY q.claimable_at
                      LIMIT $2) h`

// opsClaimableHeadSQL reads at most $2 claimable rows of the claim queue in
// claimable order (etl_job_claim_queue_eligibility_index, claimable_at up
// to $1, the caller's database clock) and counts them by owner slot and
// priority. The ORDER BY is the index's leading column: it keeps the read
// on the index and bounded by the LIMIT, even when most rows are not
// claimable (live leases, scheduled jobs), which a sequential scan would
// read past. No statement here names job_record_id: the intake role may
// read the queue's claimable_at, owner_slot and priority, never its job ids
// (deploy/postgres/least-privilege.sql).
const opsClaimableHeadSQL = `
SELECT h.owner_slot, h.priority, count(*)
FROM (SELECT q.owner_slot, q.priority
      FROM etl_job_claim_queue q
      WHERE q.claimable_at <= $1
      ORDER BY q.claimable_at
      LIMIT $2) h
GROUP BY 1, 2`

// opsClaimableSampleSQL counts the claimable rows of a sample of about $2
// percent of the claim queue's pages (TABLESAMPLE SYSTEM: each page is read
// with that probability, so a count divided by the fraction estimates the
// whole queue's), by owner slot and priority.
const opsClaimableSampleSQL = `
SELECT q.owner_slot, q.priority, count(*)
FROM etl_job_claim_queue q TABLESAMPLE SYSTEM ($2::real)
WHERE q.claimable_at <= $1
GROUP BY 1, 2`

// opsQueuePagesSQL is the claim queue's size in pages now (no statistics
// needed, no privilege beyond the catalog).
const opsQueuePagesSQL = `
SELECT pg_relation_size('etl_job_claim_queue'::regclass) / current_setting('block_size')::bigint`

// opsOwnerDetailSQL reads, for each owner slot of $2, its oldest claimable
// time (the first entry of each priority's range of
// etl_job_claim_queue_owner_index up to $1: four descents, index only) and
// its etl_claim_owners row by primary key. 'infinity' (parked) is returned
// as NULL with parked true.
const opsOwnerDetailSQL = `
SELECT s.owner_slot,
       least((SELECT q.claimable_at FROM etl_job_claim_queue q
              WHERE q.owner_slot = s.owner_slot AND q.priority = 1 AND q.claimable_at <= $1
              ORDER BY q.claimable_at LIMIT 1),
             (SELECT q.claimable_at FROM etl_job_claim_queue q
              WHERE q.owner_slot = s.owner_slot AND q.priority = 2 AND q.claimable_at <= $1
              ORDER BY q.claimable_at LIMIT 1),
             (SELECT q.claimable_at FROM etl_job_claim_queue q
              WHERE q.owner_slot = s.owner_slot AND q.priority = 3 AND q.claimable_at <= $1
              ORDER BY q.claimable_at LIMIT 1),
             (SELECT q.claimable_at FROM etl_job_claim_queue q
              WHERE q.owner_slot = s.owner_slot AND q.priority = 4 AND q.claimable_at <= $1
              ORDER BY q.claimable_at LIMIT 1)),
       o.owner_slot IS NOT NULL, o.weight, o.idle_visits,
       NULLIF(o.due_at, 'infinity'::timestamptz), o.due_at = 'infinity'::timestamptz
FROM unnest($2::bigint[]) AS s(owner_slot)
-- LIMIT 1 keeps the lookup per owner (a primary-key probe) instead of a
-- join the planner may make by reading the whole table.
LEFT JOIN LATERAL (SELECT c.owner_slot, c.weight, c.idle_visits, c.due_at FROM etl_claim_owners c
                   WHERE c.owner_slot = s.owner_slot LIMIT 1) o ON true`

// opsClaimOwnersSQL counts at most $2 rows of etl_claim_owners by claim
// state at $1 (a sequential read of that many rows: the table holds one
// small row per owner), those whose weight is not DefaultOwnerWeight, and
// reads the earliest due_at from the head of etl_claim_owners_due_index.
const opsClaimOwnersSQL = `
SELECT count(*),
       count(*) FILTER (WHERE o.due_at <= $1),
       count(*) FILTER (WHERE o.due_at > $1 AND o.due_at <> 'infinity'::timestamptz AND o.idle_visits > 0),
       count(*) FILTER (WHERE o.due_at > $1 AND o.due_at <> 'infinity'::timestamptz AND o.idle_visits = 0),
       count(*) FILTER (WHERE o.due_at = 'infinity'::timestamptz),
       count(*) FILTER (WHERE o.weight <> 1), -- DefaultOwnerWeight
       (SELECT d.due_at FROM etl_claim_owners d WHERE d.due_at <= $1 ORDER BY d.due_at, d.owner_slot LIMIT 1)
FROM (SELECT due_at, idle_visits, weight FROM etl_claim_owners LIMIT $2) o`

// ownerPrefix is the first OpsOwnerPrefixLen hex characters of the
// principal scope hash whose first 8 bytes are slot (big-endian).
func ownerPrefix(slot int64) string {
	return fmt.Sprintf("%016x", uint64(slot))[:OpsOwnerPrefixLen]
}

// OpsClaimableByOwner reads the claimable jobs by owner and priority at
// p.Now and the owners' claim state; see the comment at the top of this
// file for what each part reads.
func OpsClaimableByOwner(ctx context.Context, db DBTX, p OpsOwnersParams) (ClaimableByOwner, error) {
	if p.Now.IsZero() {
		return ClaimableByOwner{}, fmt.Errorf("ops claimable by owner: no database time")
	}
	p.ExactLimit = cmp.Or(max(p.ExactLimit, 0), OpsOwnersExactLimit)
	p.SamplePages = cmp.Or(max(p.SamplePages, 0), OpsOwnersSamplePages)
	p.Top = cmp.Or(max(p.Top, 0), OpsOwnersTop)
	p.OwnersCap = cmp.Or(max(p.OwnersCap, 0), OpsOwnersCap)
	out := ClaimableByOwner{DatabaseNow: p.Now, ExactLimit: p.ExactLimit}

	var (
		groups []claimableGroup
		total  int64
		err    error
	)
	if err := db.QueryRow(ctx, opsClaimableCountSQL, p.Now, p.ExactLimit+1).Scan(&total); err != nil {
		return ClaimableByOwner{}, fmt.Errorf("ops claimable by owner: count: %w", err)
	}
	if total <= int64(p.ExactLimit) {
		// Jobs queued between the two reads may pass ExactLimit: the
		// estimate is then made, as if the count had found them.
		if groups, total, err = claimableGroups(ctx, db, opsClaimableHeadSQL, p.Now, p.ExactLimit+1); err != nil {
			return ClaimableByOwner{}, err
		}
	}
	scale := 1.0
	if total > int64(p.ExactLimit) {
		var pages int64
		if err := db.QueryRow(ctx, opsQueuePagesSQL).Scan(&pages); err != nil {
			return ClaimableByOwner{}, fmt.Errorf("ops claimable by owner: queue size: %w", err)
		}
		pct := 100.0
		if pages > int64(p.SamplePages) {
			// float32: the sample method's argument is a real; the
			// scale must be the fraction the server uses.
			pct = float64(float32(100 * float64(p.SamplePages) / float64(pages)))
		}
		if groups, _, err = claimableGroups(ctx, db, opsClaimableSampleSQL, p.Now, pct); err != nil {
			return ClaimableByOwner{}, err
		}
		out.Estimated, out.SampledPercent, scale = pct < 100, pct, 100/pct
	}

	owners := map[int64]*OwnerClaimable{}
	for _, g := range groups {
		n := int64(math.Round(float64(g.count) * scale))
		out.Claimable += n
		out.ByPriority[g.priority-1] += n
		if g.slot == nil {
			out.WithoutOwnerSlot += n
			continue
		}
		o := owners[*g.slot]
		if o == nil {
			o = &OwnerClaimable{Slot: *g.slot, Owner: ownerPrefix(*g.slot)}
			owners[*g.slot] = o
		}
		o.Claimable += n
		o.ByPriority[g.priority-1] += n
	}
	out.OwnersWithClaimable = int64(len(owners))
	for _, o := range owners {
		out.Owners = append(out.Owners, *o)
	}
	slices.SortFunc(out.Owners, func(a, b OwnerClaimable) int {
		return cmp.Or(cmp.Compare(b.Claimable, a.Claimable), cmp.Compare(a.Slot, b.Slot))
	})
	out.Owners = out.Owners[:min(len(out.Owners), p.Top)]
	if err := readOwnerDetails(ctx, db, p.Now, out.Owners); err != nil {
		return ClaimableByOwner{}, err
	}
	if out.ClaimOwners, err = readClaimOwnerTotals(ctx, db, p.Now, p.OwnersCap); err != nil {
		return ClaimableByOwner{}, err
	}
	return out, nil
}

// claimableGroup is one (owner slot, priority) count of a claimable read.
type claimableGroup struct {
	slot     *int64
	priority int64
	count    int64
}

// claimableGroups runs a head or sample read and returns its groups and the
// sum of their counts.
func claimableGroups(ctx context.Context, db DBTX, sql string, now time.Time, arg any) ([]claimableGroup, int64, error) {
	rows, err := db.Query(ctx, sql, now, arg)
	if err != nil {
		return nil, 0, fmt.Errorf("ops claimable by owner: %w", err)
	}
	defer rows.Close()
	var out []claimableGroup
	var total int64
	for rows.Next() {
		var g claimableGroup
		if err := rows.Scan(&g.slot, &g.priority, &g.count); err != nil {
			return nil, 0, fmt.Errorf("ops claimable by owner: scan: %w", err)
		}
		if g.priority < 1 || g.priority > 4 {
			// etl_job_claim_queue_priority_range_check rules it out.
			return nil, 0, fmt.Errorf("ops claimable by owner: priority %d outside 1..4", g.priority)
		}
		total += g.count
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("ops claimable by owner: %w", err)
	}
	return out, total, nil
}

// readOwnerDetails fills the oldest claimable time and the claim state of
// owners (at most Top of them) in place.
func readOwnerDetails(ctx context.Context, db DBTX, now time.Time, owners []OwnerClaimable) error {
	if len(owners) == 0 {
		return nil
	}
	slots := make([]int64, len(owners))
	index := make(map[int64]int, len(owners))
	for i, o := range owners {
		slots[i], index[o.Slot] = o.Slot, i
	}
	rows, err := db.Query(ctx, opsOwnerDetailSQL, now, slots)
	if err != nil {
		return fmt.Errorf("ops owner details: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			slot               int64
			oldest, due        *time.Time
			registered, parked *bool
			weight, idle       *int64
		)
		if err := rows.Scan(&slot, &oldest, &registered, &weight, &idle, &due, &parked); err != nil {
			return fmt.Errorf("ops owner details: scan: %w", err)
		}
		o := &owners[index[slot]]
		o.OldestClaimableAt, o.DueAt = oldest, due
		o.State = OwnerUnregistered
		if registered == nil || !*registered || weight == nil || idle == nil || parked == nil {
			continue
		}
		o.Weight, o.IdleVisits = int(*weight), int(*idle)
		switch {
		case *parked:
			o.State = OwnerParked
		case !due.After(now):
			o.State = OwnerDue
		case o.IdleVisits > 0:
			o.State = OwnerIdle
		default:
			o.State = OwnerScheduled
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("ops owner details: %w", err)
	}
	return nil
}

// readClaimOwnerTotals counts etl_claim_owners by claim state.
func readClaimOwnerTotals(ctx context.Context, db DBTX, now time.Time, limit int) (ClaimOwnerTotals, error) {
	var t ClaimOwnerTotals
	if err := db.QueryRow(ctx, opsClaimOwnersSQL, now, limit+1).Scan(&t.Owners, &t.Due, &t.Idle, &t.Scheduled,
		&t.Parked, &t.Weighted, &t.LongestDueAt); err != nil {
		return ClaimOwnerTotals{}, fmt.Errorf("ops claim owners: %w", err)
	}
	t.Capped = t.Owners > int64(limit)
	return t, nil
}
