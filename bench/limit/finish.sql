-- Step 3: finish the claimed jobs in one statement and one transaction
-- (autocommit), as the worker's finish group (lease.Succeed, then
-- etl.LoadRows, then COMMIT) but in one round trip: each job's fenced
-- terminal UPDATE under its whole exact lease (job id, RUNNING, claim id,
-- owner, lease_expires_at > clock_timestamp()), payload and lease cleared;
-- the won jobs' queue rows deleted; one job_lifecycle outbox group row for
-- all of them (the relay's events); and :records target rows per won job
-- in processed_data (:data, :normalized: one record as the transform makes
-- it). With :records 0 (a diagnostic job without records, the burndown's)
-- the worker writes no target row, and neither does this.
\if :records > 0
WITH won AS (
    UPDATE etl_job_records j
    SET job_status = 'SUCCEEDED',
        request_payload = NULL,
        lease_claim_id = NULL, lease_owner_id = NULL,
        lease_expires_at = NULL, lease_fencing_token = NULL,
        updated_at = clock_timestamp()
    FROM unnest(:ids::uuid[], :claims::uuid[]) AS c(job_record_id, lease_claim_id)
    WHERE j.job_record_id = c.job_record_id
      AND j.job_status = 'RUNNING'
      AND j.lease_claim_id = c.lease_claim_id
      AND j.lease_owner_id = 'bench-limit-' || :client_id
      AND j.lease_expires_at > clock_timestamp()
    RETURNING j.job_record_id, j.attempt_count
), dequeued AS (
    DELETE FROM etl_job_claim_queue q
    WHERE q.job_record_id = ANY(ARRAY(SELECT job_record_id FROM won))
), events AS (
    INSERT INTO etl_outbox_events (event_kind, job_status, job_record_ids, attempt_counts)
    SELECT 'job_lifecycle', 'SUCCEEDED', array_agg(job_record_id), array_agg(attempt_count)
    FROM won
    HAVING count(*) > 0
), targets AS (
    INSERT INTO processed_data (job_record_id, data, normalized_record)
    SELECT w.job_record_id, :data, :normalized::jsonb
    FROM won w CROSS JOIN generate_series(1, :records)
)
SELECT count(*) AS finished FROM won;
\else
WITH won AS (
    UPDATE etl_job_records j
    SET job_status = 'SUCCEEDED',
        request_payload = NULL,
        lease_claim_id = NULL, lease_owner_id = NULL,
        lease_expires_at = NULL, lease_fencing_token = NULL,
        updated_at = clock_timestamp()
    FROM unnest(:ids::uuid[], :claims::uuid[]) AS c(job_record_id, lease_claim_id)
    WHERE j.job_record_id = c.job_record_id
      AND j.job_status = 'RUNNING'
      AND j.lease_claim_id = c.lease_claim_id
      AND j.lease_owner_id = 'bench-limit-' || :client_id
      AND j.lease_expires_at > clock_timestamp()
    RETURNING j.job_record_id, j.attempt_count
), dequeued AS (
    DELETE FROM etl_job_claim_queue q
    WHERE q.job_record_id = ANY(ARRAY(SELECT job_record_id FROM won))
), events AS (
    INSERT INTO etl_outbox_events (event_kind, job_status, job_record_ids, attempt_counts)
    SELECT 'job_lifecycle', 'SUCCEEDED', array_agg(job_record_id), array_agg(attempt_count)
    FROM won
    HAVING count(*) > 0
)
SELECT count(*) AS finished FROM won;
\endif
