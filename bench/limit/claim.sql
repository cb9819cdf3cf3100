-- Step 2: claim up to :batch jobs in one statement and one transaction
-- (autocommit): the oldest claimable claim-queue rows, locked FOR UPDATE
-- SKIP LOCKED (concurrent claimers never wait for each other or take the
-- same job), then their job rows set RUNNING with the whole lease (claim id,
-- owner, expiry 30 s from the database clock, fencing token from the
-- sequence, attempt + 1), and the queue rows moved to the lease's expiry.
-- That is lease.ClaimJobs's first-come first-served claim (claimSQL) without
-- what a job of this script never needs: the expired-lease takeover and its
-- exhaustion to FAILED, the re-check of the job row under a second SKIP
-- LOCKED lock, the TID update and the pickup delays. Not the product's
-- default fair claim (issue 33): no owner rotation, one owner.
-- The claimed ids, claim ids and payloads come back to the client (\gset)
-- for the finish, as the worker reads them.
WITH candidates AS (
    SELECT q.job_record_id
    FROM etl_job_claim_queue q
    WHERE q.claimable_at <= (SELECT clock_timestamp())
    ORDER BY q.claimable_at, q.job_record_id
    LIMIT :batch
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE etl_job_records j
    SET job_status = 'RUNNING',
        attempt_count = j.attempt_count + 1,
        lease_claim_id = gen_random_uuid(),
        lease_owner_id = 'bench-limit-' || :client_id,
        lease_expires_at = clock_timestamp() + interval '30 seconds',
        lease_fencing_token = nextval('etl_lease_fencing_token_sequence'),
        updated_at = clock_timestamp()
    WHERE j.job_record_id = ANY(ARRAY(SELECT job_record_id FROM candidates))
      AND j.job_status = 'PENDING' AND j.available_at <= clock_timestamp()
    RETURNING j.job_record_id, j.lease_claim_id, j.request_payload
), requeued AS (
    UPDATE etl_job_claim_queue q
    SET claimable_at = clock_timestamp() + interval '30 seconds'
    WHERE q.job_record_id = ANY(ARRAY(SELECT job_record_id FROM claimed))
)
SELECT coalesce(array_agg(job_record_id), '{}') AS ids,
       coalesce(array_agg(lease_claim_id), '{}') AS claims,
       coalesce(array_agg(request_payload), '{}') AS payloads
FROM claimed \gset
