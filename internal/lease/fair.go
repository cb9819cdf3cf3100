package lease

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/mightyetl/mightyetl/internal/tracing"
)

// fairClaimSQL is claimSQL with candidates taken fairly across owners and by
// priority within each owner (issue 33, migration 00025). $1..$3 are
// claimSQL's; $4 is the most owners one claim serves (ClaimParams.Owners),
// $5 the slots kept for the globally oldest claimable jobs
// (ClaimParams.OldestShare).
//
// Owners: the due owners of etl_claim_owners, least recently served first
// (its due index: O(owners per claim)), FOR UPDATE SKIP LOCKED, so
// concurrent claims serve different owners and never wait for each other.
// An intake's insert may hold an owner's row until its commit; the claim
// leaves that owner to the next claim (and to the oldest share).
//
// Oldest share: first, $5 slots (a sixteenth of the limit, rounded at
// random: oldestShare) go to the oldest claimable jobs of any owner through
// the eligibility index, as claimSQL takes them. Rows queued without an
// owner slot (by binaries below level 3, or before migration 00025) and
// jobs of owners the rotation has not reached are claimed there, so every
// claimable job is claimed eventually whatever the owners do.
//
// Shares: then at most limit - $5 owners are served; each may take
// max(1, floor((limit - $5) × its weight / the served owners' total
// weight)) jobs (its cap), all of them together at most limit - $5
// (rounding up small weights could pass it; the owners last in line then
// get nothing this time). Within its cap an owner's jobs are taken by
// priority, 1 first, through the queue's owner index (owner, priority,
// claimable_at, id), each priority one index range up to "now" in
// claimable_at order; so that a lower priority never starves behind a
// stream of higher ones, each of priorities 2..4 first gets a reserve of
// cap/16 of the cap on average (the fraction rounded at random, so a claim
// of a few slots still reserves in proportion over many claims), taken
// before priority 1 and skipped by its priority's full range with OFFSET.
// The branches run in order and stop when the cap is reached (a Limit over
// an Append): O(cap + 7 index descents) per owner (ownerWalk). The walks
// leave out the jobs the oldest share took: a lock this statement holds is
// not skipped, so they would come back in their owner's walk and count
// against its cap, and the fill would then walk every full owner's range
// again for the share's worth of slots (with one owner's backlog, every
// claim walked it twice).
//
// Head: every walk after the oldest share (the owners', the fill, the
// tail) starts at the claimable_at of the share's oldest job (head; when
// the share was 0 slots, of the first claimable row, read without a lock;
// 'infinity' when none is claimable, or when the share took fewer than its
// slots: it passed every claimable row then, so that no walk runs). No row
// this claim could lock lies before it (the share skipped only rows other
// transactions held, and a row that frees meanwhile waits for the next
// claim); what does lie before it are the index entries of the jobs
// already claimed (their queue rows' old versions) and finished, until a
// vacuum removes them. A walk from the start of its range passes all of
// them, with a visit to the heap for each one as long as it cannot be
// marked dead (a snapshot older than its death, in any database of the
// server, keeps it so): the oldest share passes them once per claim, as
// claimSQL does; without the head each owner's walk passed its own drained
// jobs again, twice for a priority with a reserve, and the fill a third
// time (issue 33's single-owner burndown: docs/performance.md,
// TestFairClaimOfOneOwnersBacklogSkipsItsDrainedHead).
//
// Fill: when the owners that used their whole cap have more, their walks
// go on past what they took (ownerWalk with OFFSET) for the slots still
// free, so the claim is work-conserving: never shorter than the served
// owners' claimable jobs allow, and never longer than the limit (the
// distinct jobs taken so far are counted). Tail: slots still free after
// that (no owner could be served: another claim holds every due owner, as
// when several workers claim one owner's backlog at once; or the served
// owners ran dry) go on along the eligibility index past the oldest share
// (its own rows come back first and OFFSET passes them), first-come
// first-served, as claimSQL would. Jobs the fair part took may come back
// there too: they count against the limit, so the claim may come back a
// little short, never long. No candidate list is filtered by another's ids
// with "id <> ALL(array)", a linear search per row, which at 2,000 slots
// costs more than the rest of the claim; the owners' walks leave out the
// oldest share's few ids with NOT IN over it, a hashed subplan built once
// per claim: one probe per row.
//
// Served: each served owner that gave jobs (to its walk or to the oldest
// share) goes to the back (due_at = now, idle_visits = 0). One that gave none waits 50 ms × 2^idle_visits (at most
// 6.4 s) or until its earliest future queue row (a lease expiring, a retry's
// backoff, a scheduled job), whichever is first, and one without any queue
// row is parked (fairServed); an insert or a requeue of its jobs makes it
// due again at once (pg.InsertJobs, retry and release).
var fairClaimSQL = buildFairClaimSQL()

// fairCandidates replaces claimSQL's candidates CTE.
func fairCandidates() string {
	return `WITH oldest AS (
    SELECT q.job_record_id, q.claimable_at, q.owner_slot
    FROM etl_job_claim_queue q
    WHERE q.claimable_at <= (SELECT clock_timestamp())
    ORDER BY q.claimable_at, q.job_record_id
    LIMIT $5
    FOR UPDATE SKIP LOCKED
), head AS (
    SELECT CASE
        WHEN (SELECT count(*) FROM oldest) < $5::bigint THEN 'infinity'::timestamptz
        ELSE coalesce(
            (SELECT min(claimable_at) FROM oldest),
            (SELECT q.claimable_at FROM etl_job_claim_queue q
             WHERE q.claimable_at <= (SELECT clock_timestamp())
             ORDER BY q.claimable_at, q.job_record_id LIMIT 1),
            'infinity')
    END AS claimable_at
), owners AS (
    SELECT o.ctid AS owner_ctid, o.owner_slot, o.weight
    FROM etl_claim_owners o
    WHERE o.due_at <= (SELECT clock_timestamp())
    ORDER BY o.due_at, o.owner_slot
    LIMIT least($4::bigint, $1::bigint - $5::bigint)
    FOR UPDATE SKIP LOCKED
), caps AS (
    SELECT owner_ctid, owner_slot,
           greatest(1, floor(($1::bigint - $5::bigint) * weight::numeric / sum(weight) OVER ()))::bigint AS cap
    FROM owners
), shares AS (
    SELECT owner_ctid, owner_slot, cap,
           cap / 16 + (random() < (cap % 16) / 16.0)::int AS reserve
    FROM caps
), fair AS (
    SELECT s.owner_slot, c.job_record_id, c.claimable_at
    FROM shares s CROSS JOIN LATERAL (
        ` + ownerWalk("s.cap") + `
        LIMIT s.cap
    ) c
    LIMIT $1::bigint - $5::bigint
), got AS (
    SELECT s.owner_slot, s.cap, s.reserve, count(f.job_record_id) AS got
    FROM shares s JOIN fair f ON f.owner_slot = s.owner_slot
    GROUP BY s.owner_slot, s.cap, s.reserve
), fill AS (
    SELECT c.job_record_id, c.claimable_at
    FROM got s CROSS JOIN LATERAL (
        ` + ownerWalk("s.got + $1::bigint") + `
        OFFSET s.got LIMIT $1::bigint
    ) c
    WHERE s.got >= s.cap
    LIMIT greatest($1::bigint - (SELECT count(DISTINCT job_record_id)
                                 FROM (SELECT job_record_id FROM oldest
                                       UNION ALL SELECT job_record_id FROM fair) t), 0)
), tail AS (
    SELECT q.job_record_id, q.claimable_at
    FROM etl_job_claim_queue q
    WHERE q.claimable_at <= (SELECT clock_timestamp())
      AND q.claimable_at >= (SELECT claimable_at FROM head)
    ORDER BY q.claimable_at, q.job_record_id
    OFFSET (SELECT count(*) FROM oldest)
    LIMIT greatest($1::bigint - (SELECT count(DISTINCT job_record_id)
                                 FROM (SELECT job_record_id FROM oldest
                                       UNION ALL SELECT job_record_id FROM fair
                                       UNION ALL SELECT job_record_id FROM fill) t), 0)
    FOR UPDATE SKIP LOCKED
), candidates AS (
    SELECT job_record_id,
           (extract(epoch FROM clock_timestamp() - claimable_at) * 1000000)::bigint AS pickup_micros
    FROM (SELECT job_record_id, claimable_at FROM oldest
          UNION ALL
          SELECT job_record_id, claimable_at FROM fair
          UNION ALL
          SELECT job_record_id, claimable_at FROM fill
          UNION ALL
          SELECT job_record_id, claimable_at FROM tail) c
)`
}

// Every per-owner read bounds the priority by a range (p <= priority <=
// p), not an equality, and orders by priority first: with an equality the
// planner drops the constant column from the ORDER BY, and then the
// eligibility index (claimable_at, job_record_id) gives the same order, so
// a generic plan made with one owner holding the whole queue walked it with
// the owner as a filter: for every other owner, the whole backlog (measured
// at 1,000,000 jobs of one owner: 500,000 rows filtered per owner per
// claim, 1.6 s a claim, the worker at 808 jobs/s instead of 5,419). Only
// the owner index gives (priority, claimable_at, job_record_id) after its
// owner. (Row comparisons over the index's columns would also do it, but
// PostgreSQL 15 ends such a scan on the owner column only: it read the
// owner's whole backlog for each priority it does not use.) The price: the
// range leaves claimable_at out of the scan's stop condition, so a
// priority's walk that runs out of claimable jobs passes over that owner's
// leased jobs of that priority (their claimable_at is their lease's
// expiry), at most its running jobs (TestFairClaimPlanWithOneOwnersBacklog).
// The head (claimable_at >= head) is still where each range's scan starts:
// a lower bound on priority (>=) lets the descent use the next column's.
//
// ownerWalk is the per-owner walk of fairClaimSQL over the owner s: the
// reserves of priorities 4, 3 and 2 (s.reserve each), then priority 1 and
// the rest of 2, 3 and 4, each one range of the queue's owner index from
// the head up to "now", without the oldest share's jobs, each branch
// limited to limit rows. The fill walks it again with a
// larger limit: its first rows are then the very rows the first walk took
// (locked by this statement, so SKIP LOCKED returns them again, in the
// same order), which its OFFSET passes over.
func ownerWalk(limit string) string {
	branch := func(priority int, offset, limit string) string {
		return fmt.Sprintf(`SELECT * FROM (
            SELECT q.job_record_id, q.claimable_at FROM etl_job_claim_queue q
            WHERE q.owner_slot = s.owner_slot AND q.priority >= %d AND q.priority <= %d
              AND q.claimable_at <= (SELECT clock_timestamp())
              AND q.claimable_at >= (SELECT claimable_at FROM head)
              AND q.job_record_id NOT IN (SELECT job_record_id FROM oldest)
            ORDER BY q.priority, q.claimable_at, q.job_record_id
            %sLIMIT %s
            FOR UPDATE SKIP LOCKED) p`, priority, priority, offset, limit)
	}
	var branches []string
	for p := 4; p >= 2; p-- {
		branches = append(branches, branch(p, "", "s.reserve"))
	}
	branches = append(branches, branch(1, "", limit))
	for p := 2; p <= 4; p++ {
		branches = append(branches, branch(p, "OFFSET s.reserve ", limit))
	}
	return strings.Join(branches, "\n        UNION ALL ")
}

// fairServed is the CTE that moves the served owners (see fairClaimSQL).
// An owner that gave no job and has no queue row at all on its third look
// in a row is parked at 'infinity': only an insert or a requeue of its jobs
// makes it due again (pg.InsertJobs makes an owner with idle_visits > 0 due
// with a locked write, so the two looks before parking leave at least 150 ms
// for an insert that read it as busy to commit; an insert slower than that
// still has its jobs claimed, by the oldest share).
const fairServed = `, served AS (
    UPDATE etl_claim_owners o
    SET due_at = CASE
            WHEN o.owner_slot = ANY (ARRAY(SELECT owner_slot FROM fair UNION SELECT owner_slot FROM oldest)) THEN clock_timestamp()
            WHEN o.idle_visits >= 2
             AND (SELECT q.owner_slot FROM etl_job_claim_queue q
                  WHERE q.owner_slot = o.owner_slot
                  ORDER BY q.priority, q.claimable_at LIMIT 1) IS NULL
                THEN 'infinity'::timestamptz
            -- Back off, but no later than the owner's earliest future row
            -- (LEAST ignores the NULLs of priorities without one).
            ELSE least(clock_timestamp() + interval '50 milliseconds' * power(2, least(o.idle_visits, 7)),
                       (SELECT q.claimable_at FROM etl_job_claim_queue q
                  WHERE q.owner_slot = o.owner_slot AND q.priority >= 1 AND q.priority <= 1
                    AND q.claimable_at > (SELECT clock_timestamp())
                  ORDER BY q.priority, q.claimable_at LIMIT 1),
                       (SELECT q.claimable_at FROM etl_job_claim_queue q
                  WHERE q.owner_slot = o.owner_slot AND q.priority >= 2 AND q.priority <= 2
                    AND q.claimable_at > (SELECT clock_timestamp())
                  ORDER BY q.priority, q.claimable_at LIMIT 1),
                       (SELECT q.claimable_at FROM etl_job_claim_queue q
                  WHERE q.owner_slot = o.owner_slot AND q.priority >= 3 AND q.priority <= 3
                    AND q.claimable_at > (SELECT clock_timestamp())
                  ORDER BY q.priority, q.claimable_at LIMIT 1),
                       (SELECT q.claimable_at FROM etl_job_claim_queue q
                  WHERE q.owner_slot = o.owner_slot AND q.priority >= 4 AND q.priority <= 4
                    AND q.claimable_at > (SELECT clock_timestamp())
                  ORDER BY q.priority, q.claimable_at LIMIT 1))
        END,
        idle_visits = CASE
            WHEN o.owner_slot = ANY (ARRAY(SELECT owner_slot FROM fair UNION SELECT owner_slot FROM oldest)) THEN 0
            ELSE least(o.idle_visits + 1, 1000)
        END,
        updated_at = clock_timestamp()
    WHERE o.ctid = ANY (ARRAY(SELECT owner_ctid FROM shares))
)`

func buildFairClaimSQL() string {
	start := strings.Index(claimSQL, "WITH candidates AS (")
	end := strings.Index(claimSQL, "), picked AS (")
	if start < 0 || end < 0 {
		panic("lease: claimSQL lost its candidates CTE")
	}
	sql := claimSQL[:start] + fairCandidates() + claimSQL[end+1:]
	const tail = "\n)\nSELECT 1, job_record_id"
	if !strings.Contains(sql, tail) {
		panic("lease: claimSQL lost its final SELECT")
	}
	return strings.Replace(sql, tail, "\n)"+fairServed+"\nSELECT 1, job_record_id", 1)
}

// oldestShare is the slots of a fair claim of limit jobs kept for the
// oldest claimable jobs of any owner: limit/16, the remainder's fraction
// rounded at random, so that small claims keep the share on average; never
// the whole limit when it is above 1.
func oldestShare(limit int) int {
	share := limit / 16
	if rand.IntN(16) < limit%16 {
		share++
	}
	if share >= limit && limit > 1 {
		share = limit - 1
	}
	return share
}

// The fair claim is the claim: its database spans are named as
// claimSQL's.
func init() { tracing.RegisterStatement("lease.claim", fairClaimSQL) }
