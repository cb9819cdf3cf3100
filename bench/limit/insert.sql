-- Step 1 of the job life cycle at the limit (bench/limit.go): insert :batch
-- PENDING jobs in one statement and one transaction (autocommit), as
-- pg.InsertJobs writes them outside a transaction (its plain INSERT, tried
-- before ON CONFLICT): the job row, its claim-queue row with the owner's slot
-- and priority, and the owner's etl_claim_owners row made due when it is not
-- due and served already (one owner: after its first insert, no write).
-- No job_available outbox row: pg.InsertJobsUnannounced's form (the intake
-- with its own NATS path), and what the burndown's pre-loaded backlog holds.
-- Ids and submission keys are drawn here (UUIDv7 from the database clock,
-- 32 random bytes), where the product draws them in Go; the payload and its
-- SHA-256 come in as :payload and :digest (hex), the owner as :principal.
WITH ins AS (
    INSERT INTO etl_job_records AS j (job_record_id, job_kind, principal_scope_hash, submission_key_hash,
                                      request_digest, request_payload, max_attempts, job_priority, available_at)
    SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
               PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
               FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid,
           'diagnostic', decode(:principal, 'hex'),
           uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()),
           decode(:digest, 'hex'), :payload, 3, 2, clock_timestamp()
    FROM generate_series(1, :batch)
    RETURNING j.job_record_id, j.available_at, j.job_priority,
              ('x' || encode(substr(j.principal_scope_hash, 1, 8), 'hex'))::bit(64)::bigint AS owner_slot
), queued AS (
    INSERT INTO etl_job_claim_queue (job_record_id, claimable_at, owner_slot, priority)
    SELECT job_record_id, available_at, owner_slot, job_priority FROM ins
), owners AS (
    INSERT INTO etl_claim_owners AS o (owner_slot, due_at)
    SELECT i.owner_slot, min(i.available_at) FROM ins i
    GROUP BY i.owner_slot
    HAVING NOT EXISTS (SELECT 1 FROM etl_claim_owners x
                       WHERE x.owner_slot = i.owner_slot AND x.due_at <= min(i.available_at) AND x.idle_visits = 0)
    ORDER BY i.owner_slot
    ON CONFLICT (owner_slot) DO UPDATE
    SET due_at = least(o.due_at, excluded.due_at), idle_visits = 0, updated_at = clock_timestamp()
)
SELECT count(*) AS inserted FROM ins;
