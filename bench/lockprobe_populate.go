package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mightyetl/mightyetl/internal/codes"
)

// The lock probe's data set: n jobs shaped as the product leaves them after
// a week of traffic, written by set-based statements in batches (no per-job
// API, no outbox row per insert), then VACUUM ANALYZEd and checkpointed.
//
//   - job i (1..n) was created at now - 7 days * (n-i)/n, with a
//     time-ordered UUIDv7 id as the intake draws them; 50 owners;
//   - the newest 1% are PENDING (payload kept, claim-queue row at
//     available_at) and the 0.1% before them RUNNING (payload kept, a lease
//     of a fleet worker, claim-queue row at the lease expiry); every other
//     job is terminal: 1% FAILED (etl_target_failure), 1% CANCELLED by its
//     owner, the rest SUCCEEDED, payload cleared (the product clears it at
//     the end, payload lifecycle CHECK);
//   - one job in ten is a diagnostic job, the rest etl_records jobs whose
//     payload holds lockProbeRecords records; each SUCCEEDED etl_records job
//     loaded that many processed_data rows (the contract's row shape);
//   - one response-ledger row (the synchronous path's, no job) per 20 jobs,
//     and 10 job_lifecycle outbox group rows of 100 jobs each that the relay
//     has not sent yet.
//
// The SQL is valid at every schema from 13 on: before 00014 the identity
// digests are 64-character hex text, from 00014 on 32-byte bytea.

// lockProbeRecords is the number of records of an etl_records job.
const lockProbeRecords = 3

// lockProbeBatch is the number of jobs per populate statement.
const lockProbeBatch = 100_000

// populateSQL returns the statement that inserts jobs $1..$2 of $3 (with
// the newest $4 PENDING and the $5 before them RUNNING), their claim-queue
// rows and processed_data rows. $6 is "now" of the data set, $7 a
// diagnostic payload, $8 an etl_records payload, $9 the RUNNING jobs'
// lease expiry.
func populateSQL(byteaDigests bool) string {
	digest := func(expr string) string {
		d := "sha256(convert_to(" + expr + ", 'UTF8'))"
		if byteaDigests {
			return d
		}
		return "encode(" + d + ", 'hex')"
	}
	r := strings.NewReplacer(
		"{owner}", digest("'lockprobe-owner-' || (i % 50)"),
		"{key}", digest("'lockprobe-key-' || i"),
		"{request}", digest("'lockprobe-request-' || i"),
		"{records}", fmt.Sprint(lockProbeRecords),
		"{target_failure}", codes.TargetFailure,
		"{cancelled_by_owner}", codes.CancelledByOwner,
	)
	return r.Replace(`
WITH src AS (
    SELECT g AS i,
           $6::timestamptz - interval '7 days' * (($3::bigint - g)::float8 / $3::bigint) AS ts,
           CASE WHEN g > $3::bigint - $4::bigint THEN 'PENDING'
                WHEN g > $3::bigint - $4::bigint - $5::bigint THEN 'RUNNING'
                WHEN g % 100 = 0 THEN 'FAILED'
                WHEN g % 100 = 1 THEN 'CANCELLED'
                ELSE 'SUCCEEDED' END AS st,
           CASE WHEN g % 10 = 0 THEN 'diagnostic' ELSE 'etl_records' END AS kind
    FROM generate_series($1::bigint, $2::bigint) AS g
), ins AS (
    INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash,
                                 request_digest, request_payload, job_status, attempt_count, max_attempts,
                                 available_at, lease_claim_id, lease_owner_id, lease_expires_at,
                                 lease_fencing_token, failure_code, created_at, updated_at,
                                 cancellation_key_hash, cancellation_code, job_cancelled_at)
    SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send((extract(epoch FROM ts) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid,
           kind, {owner}, {key}, {request},
           CASE WHEN st IN ('PENDING', 'RUNNING') THEN CASE kind WHEN 'diagnostic' THEN $7::text ELSE $8::text END END,
           st,
           CASE st WHEN 'PENDING' THEN 0 WHEN 'CANCELLED' THEN 0 ELSE 1 END,
           5,
           ts,
           CASE WHEN st = 'RUNNING' THEN gen_random_uuid() END,
           CASE WHEN st = 'RUNNING' THEN 'lockprobe-fleet-worker-' || (i % 8) END,
           CASE WHEN st = 'RUNNING' THEN $9::timestamptz END,
           CASE WHEN st = 'RUNNING' THEN nextval('etl_lease_fencing_token_sequence') END,
           CASE WHEN st = 'FAILED' THEN '{target_failure}' END,
           ts,
           CASE WHEN st = 'PENDING' THEN ts ELSE ts + interval '2 seconds' END,
           CASE WHEN st = 'CANCELLED' THEN encode(sha256(convert_to('lockprobe-cancel-' || i, 'UTF8')), 'hex') END,
           CASE WHEN st = 'CANCELLED' THEN '{cancelled_by_owner}' END,
           CASE WHEN st = 'CANCELLED' THEN ts + interval '1 second' END
    FROM src
    RETURNING job_record_id, job_kind, job_status, available_at, lease_expires_at
), queued AS (
    INSERT INTO etl_job_claim_queue (job_record_id, claimable_at)
    SELECT job_record_id, CASE job_status WHEN 'PENDING' THEN available_at ELSE lease_expires_at END
    FROM ins WHERE job_status IN ('PENDING', 'RUNNING')
)
INSERT INTO processed_data (job_record_id, data, normalized_record)
SELECT ins.job_record_id,
       'ID:' || left(ins.job_record_id::text, 8) || '-' || k || ',NAME:JANE DOE,AMOUNT:999.90,',
       jsonb_build_object('ID', left(ins.job_record_id::text, 8) || '-' || k, 'NAME', 'JANE DOE', 'AMOUNT', '999.90')
FROM ins, generate_series(1, {records}) AS k
WHERE ins.job_status = 'SUCCEEDED' AND ins.job_kind = 'etl_records'`)
}

// ledgerSQL inserts the synchronous path's response-ledger rows for jobs
// $1..$2 (one per 20), created at the jobs' times ($3 jobs, $4 now).
const ledgerSQL = `
INSERT INTO etl_idempotency_records (principal_scope_hash, idempotency_key_hash, request_digest, response_text, created_at)
SELECT encode(sha256(convert_to('lockprobe-owner-' || (g % 50), 'UTF8')), 'hex'),
       encode(sha256(convert_to('lockprobe-sync-key-' || g, 'UTF8')), 'hex'),
       encode(sha256(convert_to('lockprobe-sync-request-' || g, 'UTF8')), 'hex'),
       'Processed: r1' || chr(10) || 'Processed: r2' || chr(10) || 'Processed: r3',
       $4::timestamptz - interval '7 days' * (($3::bigint - g)::float8 / $3::bigint)
FROM generate_series($1::bigint, $2::bigint) AS g
WHERE g % 20 = 0`

// outboxSQL leaves 10 job_lifecycle group rows of 100 of the newest
// SUCCEEDED jobs each, as a relay a moment behind would.
const outboxSQL = `
INSERT INTO etl_outbox_events (event_kind, job_status, job_record_ids, attempt_counts)
SELECT 'job_lifecycle', 'SUCCEEDED', array_agg(job_record_id), array_agg(1)
FROM (SELECT job_record_id, (row_number() OVER (ORDER BY job_record_id DESC) - 1) / 100 AS grp
      FROM etl_job_records WHERE job_status = 'SUCCEEDED'
      ORDER BY job_record_id DESC LIMIT 1000) s
GROUP BY grp`

// lockProbePayload is an etl_records payload of lockProbeRecords records,
// about 60 bytes each.
func lockProbePayload() string {
	var b strings.Builder
	b.WriteByte('[')
	for k := range lockProbeRecords {
		if k > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":"r%d","name":"jane doe","amount":"999.9"}`, k+1)
	}
	b.WriteByte(']')
	return b.String()
}

// populateStats describe the populated data set.
type populateStats struct {
	took                 time.Duration
	pending, running     int
	jobTableMiB, dbMiB   float64
	processedRows        int64
	ledgerRows, outboxes int64
}

// populate writes the lock probe's data set (see the top of this file) at
// schema version schema; liveLeases false gives the RUNNING jobs leases
// that expired a minute ago (a fleet stopped for a migration that needs
// it, as 00014 does).
func (h *harness) populate(ctx context.Context, n int, schema int64, liveLeases bool) (populateStats, error) {
	start := time.Now()
	st := populateStats{pending: max(n/100, 10), running: max(n/1000, 5)}
	if st.pending+st.running > n {
		return st, fmt.Errorf("populate: %d jobs are too few (at least %d)", n, st.pending+st.running)
	}
	var now time.Time
	if err := h.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		return st, fmt.Errorf("populate: %w", err)
	}
	expiry := now.Add(time.Hour)
	if !liveLeases {
		expiry = now.Add(-time.Minute)
	}
	sql := populateSQL(schema >= 14)
	diagnostic := zeroPayload
	records := lockProbePayload()
	for lo := 1; lo <= n; lo += lockProbeBatch {
		hi := min(lo+lockProbeBatch-1, n)
		if _, err := h.pool.Exec(ctx, sql, lo, hi, n, st.pending, st.running, now, diagnostic, records, expiry); err != nil {
			return st, fmt.Errorf("populate jobs %d..%d: %w", lo, hi, err)
		}
		if _, err := h.pool.Exec(ctx, ledgerSQL, lo, hi, n, now); err != nil {
			return st, fmt.Errorf("populate ledger %d..%d: %w", lo, hi, err)
		}
	}
	if _, err := h.pool.Exec(ctx, outboxSQL); err != nil {
		return st, fmt.Errorf("populate outbox: %w", err)
	}
	if _, err := h.pool.Exec(ctx, "VACUUM ANALYZE"); err != nil {
		return st, fmt.Errorf("vacuum analyze: %w", err)
	}
	// A checkpoint now, so the first migrations do not share the disk with
	// the one the bulk load would otherwise bring on (needs superuser or
	// pg_checkpoint; skipped without). A small data set (the smoke test)
	// brings none on.
	if n >= lockProbeBatch {
		_, _ = h.pool.Exec(ctx, "CHECKPOINT")
	}
	st.took = time.Since(start)
	err := h.pool.QueryRow(ctx, `SELECT pg_total_relation_size('etl_job_records') / 1048576.0,
		pg_database_size(current_database()) / 1048576.0,
		(SELECT count(*) FROM processed_data), (SELECT count(*) FROM etl_idempotency_records),
		(SELECT count(*) FROM etl_outbox_events)`).
		Scan(&st.jobTableMiB, &st.dbMiB, &st.processedRows, &st.ledgerRows, &st.outboxes)
	if err != nil {
		return st, fmt.Errorf("populate: sizes: %w", err)
	}
	return st, nil
}
