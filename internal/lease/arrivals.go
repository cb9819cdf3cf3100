package lease

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/tracing"
)

// ArrivalsWindow is how many of the most recently claimable queue rows one
// ClaimArrivals looks at, ArrivalsMaxAge how long ago at most (by the
// database clock) they became claimable, and ArrivalsPerOwner the most
// jobs of one owner it takes;
// ArrivalsServedFor is how long an owner whose jobs it took is not due to
// the fair claim's rotation, unless it submits (arrivalsServedSQL).
const (
	ArrivalsWindow    = 256
	ArrivalsMaxAge    = 5 * time.Second
	ArrivalsPerOwner  = 4
	ArrivalsServedFor = time.Second
)

// arrivalsSQL is claimSQL with the candidates of ClaimArrivals: the jobs
// of light owners, whose claimable jobs all became claimable just now.
// $1..$3 are claimSQL's.
//
// Window: the ArrivalsWindow queue rows most recently claimable, within
// ArrivalsMaxAge, walked backwards along the eligibility index from "now"
// (the jobs a wake-up announces: a new job, a retry whose backoff passed, a
// lease that just expired), without locks: O(window) whatever the table
// size. The age bound is an index condition, so the walk never goes past
// it: just below "now" the index holds the entries of finished jobs whose
// lease expiry has passed (a queue row moves to its lease's expiry when
// claimed and is deleted when its job ends; the entry stays until vacuum),
// as many as the fleet finished in that time, and without the bound a
// backlog whose youngest job is older would have the walk pass all of them
// (measured: 462 ms for 256 rows after a 300,000-job drain).
//
// Light owners: those in the window (rows without an owner slot are left
// to the other claims) with no claimable row older than their oldest
// window row: one probe of the owner index per owner, which stops at the
// owner's first older claimable row (a backlog's head) and otherwise reads
// the owner's rows older than its window rows, none of them claimable (its
// running jobs' rows sit at their lease's expiry, after "now"). So every
// claimable job of a light owner arrived within the window, and the claim
// takes at most ArrivalsPerOwner of them, in the owner's claim order
// (priority, then oldest first); an owner with an older queue, however
// recent its last job, is left to the fair claim's rotation. (A first
// form took only owners with at most ArrivalsPerOwner claimable jobs: a
// light owner whose jobs piled up while claims were slow, as at a worker's
// start, then stayed out until the fair claim drained it, 40 jobs and 3 s
// in the benchmark.) Its candidates need no
// etl_claim_owners row: that is what lets it take a light owner's job
// while another claim holds the owner's row (a claim that started before
// the job was inserted, whose snapshot does not see it, holds that row
// until it commits and then backs the owner off as found empty).
//
// Candidates: at most $1 of the light owners' window rows, at most
// ArrivalsPerOwner of each, every owner's next job before any owner's
// second (then by arrival), locked FOR UPDATE
// SKIP LOCKED on their queue rows by primary key (re-checked on the newest
// row version: claimable up to "now"), returned oldest first. A job
// another claim holds is skipped, not waited for: the claim may come back
// short.
//
// Served: see arrivalsServedSQL.
var arrivalsSQL = buildArrivalsSQL()

// arrivalsServedSQL is the CTE of arrivalsSQL that keeps the fair claim
// off the owners whose jobs it took: due again in ArrivalsServedFor, idle
// visits reset, each row locked FOR UPDATE SKIP LOCKED (one a claim holds
// keeps its state). Otherwise the next fair claim, due to serve the owner
// after its insert, would lock its etl_claim_owners row, find nothing (the
// arrivals claim took it) and back the owner off as idle; the owner's next
// insert then has to make it due again, a write that waits for any claim
// holding the row, tens to hundreds of milliseconds under a backlog
// (measured: the light owner's insert p99 374 ms against 70 ms without
// wake-up slots). An insert makes the owner due at once whatever this set
// (pg.InsertJobs), and a retry or release by the job's new time.
const arrivalsServedSQL = `, arrivals_served AS (
    UPDATE etl_claim_owners o
    SET due_at = clock_timestamp() + interval 'ARRIVALS_SERVED_FOR', idle_visits = 0, updated_at = clock_timestamp()
    WHERE o.ctid = ANY(ARRAY(
        SELECT c.ctid FROM etl_claim_owners c
        WHERE c.owner_slot = ANY(ARRAY(SELECT l.owner_slot FROM locked l
                                       WHERE l.job_record_id = ANY(ARRAY(SELECT job_record_id FROM claimed))))
        FOR UPDATE SKIP LOCKED))
)`

const arrivalsCandidates = `WITH recent AS (
    SELECT q.job_record_id, q.claimable_at, q.owner_slot, q.priority
    FROM etl_job_claim_queue q
    WHERE q.claimable_at <= (SELECT clock_timestamp())
      AND q.claimable_at > (SELECT clock_timestamp()) - interval 'ARRIVALS_MAX_AGE'
    ORDER BY q.claimable_at DESC, q.job_record_id DESC
    LIMIT ARRIVALS_WINDOW
), owners AS (
    SELECT r.owner_slot, min(r.claimable_at) AS since
    FROM recent r
    WHERE r.owner_slot IS NOT NULL
    GROUP BY r.owner_slot
), light AS (
    SELECT o.owner_slot
    FROM owners o
    WHERE (
        -- A claimable row of the owner older than its window rows, in the
        -- owner index's order: the priority bounded by a range and ordered
        -- first, as the fair claim's walks are, so that no plan can serve
        -- it from the eligibility index with the owner as a filter (an
        -- EXISTS was planned so, made while one owner held the queue:
        -- 82,240 rows filtered per owner per claim in the benchmark).
        SELECT e.job_record_id FROM etl_job_claim_queue e
        WHERE e.owner_slot = o.owner_slot AND e.priority >= 1 AND e.priority <= 4
          AND e.claimable_at < o.since
        ORDER BY e.priority, e.claimable_at, e.job_record_id
        LIMIT 1) IS NULL
), turns AS (
    SELECT r.job_record_id, r.claimable_at,
           row_number() OVER (PARTITION BY r.owner_slot ORDER BY r.priority, r.claimable_at, r.job_record_id) AS turn
    FROM recent r
    WHERE r.owner_slot = ANY(ARRAY(SELECT owner_slot FROM light))
), locked AS (
    -- By primary key, without ORDER BY, which the eligibility index would
    -- serve by walking the backlog with the ids as a filter.
    SELECT q.job_record_id, q.claimable_at, q.owner_slot
    FROM etl_job_claim_queue q
    WHERE q.job_record_id = ANY(ARRAY(SELECT job_record_id FROM turns WHERE turn <= ARRIVALS_PER_OWNER
                                      ORDER BY turn, claimable_at, job_record_id LIMIT $1))
      AND q.claimable_at <= (SELECT clock_timestamp())
    FOR UPDATE SKIP LOCKED
), candidates AS (
    SELECT job_record_id,
           (extract(epoch FROM clock_timestamp() - claimable_at) * 1000000)::bigint AS pickup_micros
    FROM locked
    ORDER BY claimable_at, job_record_id
)`

func buildArrivalsSQL() string {
	start := strings.Index(claimSQL, "WITH candidates AS (")
	end := strings.Index(claimSQL, "), picked AS (")
	if start < 0 || end < 0 {
		panic("lease: claimSQL lost its candidates CTE")
	}
	r := strings.NewReplacer("ARRIVALS_WINDOW", strconv.Itoa(ArrivalsWindow), "ARRIVALS_PER_OWNER", strconv.Itoa(ArrivalsPerOwner),
		"ARRIVALS_MAX_AGE", micros(ArrivalsMaxAge), "ARRIVALS_SERVED_FOR", micros(ArrivalsServedFor))
	sql := claimSQL[:start] + r.Replace(arrivalsCandidates) + claimSQL[end+1:]
	const tail = "\n)\nSELECT 1, job_record_id"
	if !strings.Contains(sql, tail) {
		panic("lease: claimSQL lost its final SELECT")
	}
	return strings.Replace(sql, tail, "\n)"+r.Replace(arrivalsServedSQL)+"\nSELECT 1, job_record_id", 1)
}

// micros is d as an SQL interval literal's text.
func micros(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) + " microseconds" }

// ClaimArrivals claims up to p.Limit jobs for p.OwnerID in one statement,
// as ClaimJobs does (fresh exact leases, exhausted leases failed), but only
// jobs of light owners, whose claimable jobs are all among the
// ArrivalsWindow most recently claimable (within ArrivalsMaxAge): at most
// ArrivalsPerOwner of each, in the owner's claim order (arrivalsSQL). It is
// the claim of a worker's wake-up slots: a light owner's new job is taken
// at once whatever another owner has queued and whatever the worker's
// regular claim holds, and a backlog's never. p.Owners is ignored. Safe to
// run concurrently with any other claim: it skips what they lock and never
// waits for them.
func ClaimArrivals(ctx context.Context, db pg.DBTX, p ClaimParams) (ClaimResult, error) {
	p.Owners = 0
	return claimJobs(ctx, db, arrivalsSQL, p)
}

func init() { tracing.RegisterStatement("lease.claim_arrivals", arrivalsSQL) }
