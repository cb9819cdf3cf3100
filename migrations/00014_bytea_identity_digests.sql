-- Identity digests as 32-byte bytea (issue 11): principal_scope_hash,
-- submission_key_hash and request_digest of etl_job_records were 64-character
-- lowercase hex text (domains of migration 00005). Each is a SHA-256 value
-- (a keyed one for the two hashes), so bytea holds it in half the bytes: the
-- row, the submission-key unique index (two digests per entry) and the owner
-- pagination index shrink, and with them the insert's WAL and CPU. Measured
-- with a 500-job insert statement into copies of the table (pgbench, one
-- client, alternating): hex 12.9-15.9 ms and 1,706-1,759 WAL bytes per job,
-- bytea 11.8-12.5 ms and 1,252-1,382 bytes. River keys its unique index on a
-- 32-byte bytea too.
--
-- What changes for readers:
--   * the three columns are of domain etl_sha256_digest (bytea, exactly 32
--     bytes; the CHECK runs only when a value is assigned: at insert);
--   * the SQL functions keep their signatures: they take and return hex
--     text, as before, and decode/encode at the boundary
--     (etl_cancel_job, etl_operator_cancel_job, etl_ops_active_jobs,
--     etl_operator_replay_job);
--   * operators reading the columns directly use encode(col, 'hex') to see
--     the former text.
-- cancellation_key_hash stays hex text: it is NULL on every job but a
-- cancelled one, in no index, and compared only by the cancel paths. The
-- idempotency ledger (etl_idempotency_records) and the outbox keep text too:
-- neither is written per durable job.
--
-- The text domains of 00005 (etl_job_principal_scope_hash,
-- etl_job_submission_key_hash, etl_job_request_digest) stay, unused, and
-- down uses them again: dropping a domain needs its owner, and in a
-- deployment prepared by deploy/postgres/least-privilege.sql before this
-- migration they belong to the superuser, not to the migrator role that
-- runs this one. The new domain belongs to whoever runs this migration
-- (least-privilege.sql now hands every etl_ domain to the migrator).
--
-- Existing rows are converted in place (decode(..., 'hex')): one rewrite of
-- the table and its indexes under an ACCESS EXCLUSIVE lock, as every column
-- type change. The owner guard trigger of 00007 names principal_scope_hash
-- in its WHEN clause, so it is dropped and created again around the change.
-- Down converts back with encode(..., 'hex') into the text domains and
-- restores the functions' former bodies.

-- +goose Up
-- +goose StatementBegin
-- A worker from before this migration reads request_digest as text and
-- would fail every job it claims afterwards (its integrity check compares
-- the 32 raw bytes with a hex digest). Refuse while any job holds a live
-- lease: stop every worker first (a killed worker's leases end within the
-- lease duration). Found through the claim queue's eligibility index: a
-- RUNNING job's queue row sits at its lease expiry.
DO $guard$
BEGIN
    IF EXISTS (SELECT 1 FROM etl_job_claim_queue q
               JOIN etl_job_records j ON j.job_record_id = q.job_record_id
               WHERE q.claimable_at > clock_timestamp()
                 AND j.job_status = 'RUNNING' AND j.lease_expires_at > clock_timestamp()) THEN
        RAISE EXCEPTION 'stop every worker before migration 00014: jobs hold live leases (retry once they end)'
            USING ERRCODE = 'object_in_use';
    END IF;
END
$guard$;
CREATE DOMAIN etl_sha256_digest AS bytea
    CONSTRAINT etl_sha256_digest_length_check CHECK (octet_length(VALUE) = 32);
DROP TRIGGER etl_job_owner_immutable_guard_trigger ON etl_job_records;
ALTER TABLE etl_job_records
    ALTER COLUMN principal_scope_hash TYPE etl_sha256_digest USING decode(principal_scope_hash, 'hex'),
    ALTER COLUMN submission_key_hash  TYPE etl_sha256_digest USING decode(submission_key_hash, 'hex'),
    ALTER COLUMN request_digest       TYPE etl_sha256_digest USING decode(request_digest, 'hex');
CREATE TRIGGER etl_job_owner_immutable_guard_trigger
    BEFORE UPDATE OF principal_scope_hash ON etl_job_records
    FOR EACH ROW
    WHEN (OLD.principal_scope_hash IS DISTINCT FROM NEW.principal_scope_hash)
    EXECUTE FUNCTION etl_job_owner_immutable_guard();
-- The type change drops the columns' statistics and the rewrite does not
-- count towards auto-analyze; the planner gets them back at once.
ANALYZE etl_job_records;

CREATE OR REPLACE FUNCTION etl_cancel_job(p_job_record_id uuid, p_principal_scope_hash text, p_cancellation_key_hash text)
RETURNS TABLE (previous_status text, job_record_id uuid, job_kind text, job_status text, attempt_count integer,
               failure_code text, cancellation_code text, created_at timestamptz, updated_at timestamptz,
               request_digest text, replay_source_job_record_id uuid, replay_root_job_record_id uuid,
               replay_generation_count integer)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $fn$
WITH cancelled AS (
    UPDATE public.etl_job_records j
    SET job_status = 'CANCELLED',
        request_payload = NULL,
        lease_claim_id = NULL, lease_owner_id = NULL,
        lease_expires_at = NULL, lease_fencing_token = NULL,
        cancellation_key_hash = p_cancellation_key_hash,
        cancellation_code = 'etl_job_cancelled_by_owner',
        job_cancelled_at = clock_timestamp(),
        updated_at = clock_timestamp()
    FROM (
        SELECT r.job_record_id, r.job_status
        FROM public.etl_job_records r
        WHERE r.job_record_id = p_job_record_id AND r.principal_scope_hash = decode(p_principal_scope_hash, 'hex')
          AND r.job_status IN ('PENDING', 'RUNNING')
        FOR UPDATE
    ) old
    WHERE j.job_record_id = old.job_record_id
      AND j.job_status IN ('PENDING', 'RUNNING')
    RETURNING old.job_status AS previous_status, j.job_record_id, j.job_kind, j.job_status, j.attempt_count,
              j.failure_code::text AS failure_code, j.cancellation_code, j.created_at, j.updated_at,
              encode(j.request_digest, 'hex') AS request_digest, j.replay_source_job_record_id,
              j.replay_root_job_record_id, j.replay_generation_count
), dequeued AS (
    -- A cancelled job leaves the claim queue in the same statement.
    DELETE FROM public.etl_job_claim_queue q USING cancelled c
    WHERE q.job_record_id = c.job_record_id AND q.job_record_id = p_job_record_id
), lifecycle_events AS (
    INSERT INTO public.etl_outbox_events (event_kind, job_record_id, job_status, attempt_count, event_code)
    SELECT 'job_lifecycle', c.job_record_id, 'CANCELLED', c.attempt_count, 'etl_job_cancelled_by_owner'
    FROM cancelled c
), revocation_events AS (
    INSERT INTO public.etl_outbox_events (event_kind, job_record_id, job_status, attempt_count, event_code)
    SELECT 'lease_revoked', c.job_record_id, 'CANCELLED', c.attempt_count, 'etl_job_cancelled_by_owner'
    FROM cancelled c WHERE c.previous_status = 'RUNNING'
)
SELECT * FROM cancelled
$fn$;

CREATE OR REPLACE FUNCTION etl_operator_cancel_job(p_job_record_id uuid, p_operator_scope_hash text, p_cancellation_key_hash text)
RETURNS TABLE (previous_status text, job_record_id uuid, job_kind text, job_status text, attempt_count integer,
               failure_code text, cancellation_code text, created_at timestamptz, updated_at timestamptz,
               request_digest text, replay_source_job_record_id uuid, replay_root_job_record_id uuid,
               replay_generation_count integer)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $fn$
WITH cancelled AS (
    UPDATE public.etl_job_records j
    SET job_status = 'CANCELLED',
        request_payload = NULL,
        lease_claim_id = NULL, lease_owner_id = NULL,
        lease_expires_at = NULL, lease_fencing_token = NULL,
        cancellation_key_hash = p_cancellation_key_hash,
        cancellation_code = 'etl_job_cancelled_by_operator',
        job_cancelled_at = clock_timestamp(),
        updated_at = clock_timestamp()
    FROM (
        SELECT r.job_record_id, r.job_status
        FROM public.etl_job_records r
        WHERE r.job_record_id = p_job_record_id
          AND r.job_status IN ('PENDING', 'RUNNING')
        FOR UPDATE
    ) old
    WHERE j.job_record_id = old.job_record_id
      AND j.job_status IN ('PENDING', 'RUNNING')
    RETURNING old.job_status AS previous_status, j.job_record_id, j.job_kind, j.job_status, j.attempt_count,
              j.failure_code::text AS failure_code, j.cancellation_code, j.created_at, j.updated_at,
              encode(j.request_digest, 'hex') AS request_digest, j.replay_source_job_record_id,
              j.replay_root_job_record_id, j.replay_generation_count
), dequeued AS (
    DELETE FROM public.etl_job_claim_queue q USING cancelled c
    WHERE q.job_record_id = c.job_record_id AND q.job_record_id = p_job_record_id
), lifecycle_events AS (
    INSERT INTO public.etl_outbox_events (event_kind, job_record_id, job_status, attempt_count, event_code,
                                          actor_principal_scope_hash)
    SELECT 'job_lifecycle', c.job_record_id, 'CANCELLED', c.attempt_count, 'etl_job_cancelled_by_operator',
           p_operator_scope_hash
    FROM cancelled c
), revocation_events AS (
    INSERT INTO public.etl_outbox_events (event_kind, job_record_id, job_status, attempt_count, event_code,
                                          actor_principal_scope_hash)
    SELECT 'lease_revoked', c.job_record_id, 'CANCELLED', c.attempt_count, 'etl_job_cancelled_by_operator',
           p_operator_scope_hash
    FROM cancelled c WHERE c.previous_status = 'RUNNING'
)
SELECT * FROM cancelled
$fn$;

CREATE OR REPLACE FUNCTION etl_ops_active_jobs(p_limit integer)
RETURNS TABLE (job_record_id uuid, job_kind text, job_status text, principal_scope_hash text,
               attempt_count integer, max_attempts integer, claimable_at timestamptz,
               lease_owner_id text, lease_expires_at timestamptz, created_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $fn$
SELECT j.job_record_id, j.job_kind, j.job_status, encode(j.principal_scope_hash, 'hex'), j.attempt_count,
       j.max_attempts, q.claimable_at, j.lease_owner_id::text, j.lease_expires_at, j.created_at
FROM (SELECT q0.job_record_id, q0.claimable_at FROM public.etl_job_claim_queue q0
      ORDER BY q0.claimable_at, q0.job_record_id LIMIT p_limit) q
JOIN public.etl_job_records j ON j.job_record_id = q.job_record_id
WHERE j.job_status IN ('PENDING', 'RUNNING')
$fn$;

CREATE OR REPLACE FUNCTION etl_operator_replay_job(p_source uuid, p_operator_scope_hash text, p_replay_key_hash text,
                                        p_request_digest text, p_payload text, p_job_record_id uuid)
RETURNS TABLE (outcome text, job_record_id uuid, job_kind text, job_status text, attempt_count integer,
               failure_code text, cancellation_code text, created_at timestamptz, updated_at timestamptz,
               request_digest text, replay_source_job_record_id uuid, replay_root_job_record_id uuid,
               replay_generation_count integer)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $fn$
DECLARE
    v_kind text;
    v_status text;
    v_max_attempts integer;
    v_digest bytea;
    v_owner bytea;
    v_key bytea := decode(p_replay_key_hash, 'hex');
    v_request_digest bytea := decode(p_request_digest, 'hex');
    v_root uuid;
    v_generation integer;
    v_job uuid;
    v_available timestamptz;
    v_outcome text;
BEGIN
    SELECT s.job_kind, s.job_status, s.max_attempts, s.request_digest, s.principal_scope_hash,
           s.replay_root_job_record_id, s.replay_generation_count
    INTO v_kind, v_status, v_max_attempts, v_digest, v_owner, v_root, v_generation
    FROM public.etl_job_records s
    WHERE s.job_record_id = p_source
    FOR UPDATE;
    IF NOT FOUND THEN
        outcome := 'not_found';
        RETURN NEXT;
        RETURN;
    END IF;

    -- The job this key already made for the source's owner, read in a
    -- statement snapshot taken after the lock (it sees a concurrent winner
    -- that committed while this call waited).
    SELECT CASE WHEN k.replay_source_job_record_id = p_source AND k.request_digest = v_request_digest
                THEN 'replayed' ELSE 'key_reused' END, k.job_record_id
    INTO v_outcome, v_job
    FROM public.etl_job_records k
    WHERE k.principal_scope_hash = v_owner AND k.submission_key_hash = v_key;
    IF NOT FOUND THEN
        v_outcome := CASE
            WHEN v_status IN ('PENDING', 'RUNNING') THEN 'source_active'
            WHEN v_status = 'SUCCEEDED' THEN 'source_succeeded'
            WHEN v_digest <> v_request_digest THEN 'payload_mismatch'
            WHEN v_generation >= 100 THEN 'generation_exhausted'
        END;
        IF v_outcome IS NOT NULL THEN
            outcome := v_outcome;
            RETURN NEXT;
            RETURN;
        END IF;
        IF v_root IS NULL THEN
            v_root := p_source;
            v_generation := 1;
        ELSE
            v_generation := v_generation + 1;
        END IF;
        -- ON CONFLICT DO NOTHING on (principal_scope_hash,
        -- submission_key_hash): a concurrent replay of another source under
        -- the same key that committed after the lookup wins; this call then
        -- reads that job below and refuses or returns it.
        INSERT INTO public.etl_job_records AS j (job_record_id, job_kind, principal_scope_hash, submission_key_hash,
                                                 request_digest, request_payload, max_attempts,
                                                 replay_source_job_record_id, replay_root_job_record_id,
                                                 replay_generation_count)
        VALUES (p_job_record_id, v_kind, v_owner, v_key, v_request_digest, p_payload, v_max_attempts,
                p_source, v_root, v_generation)
        ON CONFLICT (principal_scope_hash, submission_key_hash) DO NOTHING
        RETURNING j.job_record_id, j.available_at INTO v_job, v_available;
        IF v_job IS NOT NULL THEN
            v_outcome := 'created';
            INSERT INTO public.etl_job_claim_queue (job_record_id, claimable_at) VALUES (v_job, v_available);
            INSERT INTO public.etl_outbox_events (event_kind, job_status, job_record_ids, attempt_counts,
                                                  actor_principal_scope_hash)
            VALUES ('job_available', 'PENDING', ARRAY[v_job], ARRAY[0], p_operator_scope_hash);
        ELSE
            SELECT CASE WHEN k.replay_source_job_record_id = p_source AND k.request_digest = v_request_digest
                        THEN 'replayed' ELSE 'key_reused' END, k.job_record_id
            INTO v_outcome, v_job
            FROM public.etl_job_records k
            WHERE k.principal_scope_hash = v_owner AND k.submission_key_hash = v_key;
            IF NOT FOUND THEN
                -- The winner's row vanished between the two statements;
                -- the caller may retry with the same key and body.
                RAISE EXCEPTION 'the job holding the replay key vanished' USING ERRCODE = 'serialization_failure';
            END IF;
        END IF;
    END IF;
    IF v_outcome = 'key_reused' THEN
        outcome := v_outcome;
        RETURN NEXT;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT v_outcome, r.job_record_id, r.job_kind::text, r.job_status::text, r.attempt_count,
           r.failure_code::text, r.cancellation_code::text, r.created_at, r.updated_at,
           encode(r.request_digest, 'hex'), r.replay_source_job_record_id, r.replay_root_job_record_id,
           r.replay_generation_count
    FROM public.etl_job_records r
    WHERE r.job_record_id = v_job;
END
$fn$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DROP TRIGGER etl_job_owner_immutable_guard_trigger ON etl_job_records;
ALTER TABLE etl_job_records
    ALTER COLUMN principal_scope_hash TYPE etl_job_principal_scope_hash USING encode(principal_scope_hash, 'hex'),
    ALTER COLUMN submission_key_hash  TYPE etl_job_submission_key_hash USING encode(submission_key_hash, 'hex'),
    ALTER COLUMN request_digest       TYPE etl_job_request_digest USING encode(request_digest, 'hex');
DROP DOMAIN etl_sha256_digest;
CREATE TRIGGER etl_job_owner_immutable_guard_trigger
    BEFORE UPDATE OF principal_scope_hash ON etl_job_records
    FOR EACH ROW
    WHEN (OLD.principal_scope_hash IS DISTINCT FROM NEW.principal_scope_hash)
    EXECUTE FUNCTION etl_job_owner_immutable_guard();

CREATE OR REPLACE FUNCTION etl_cancel_job(p_job_record_id uuid, p_principal_scope_hash text, p_cancellation_key_hash text)
RETURNS TABLE (previous_status text, job_record_id uuid, job_kind text, job_status text, attempt_count integer,
               failure_code text, cancellation_code text, created_at timestamptz, updated_at timestamptz,
               request_digest text, replay_source_job_record_id uuid, replay_root_job_record_id uuid,
               replay_generation_count integer)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $fn$
WITH cancelled AS (
    UPDATE public.etl_job_records j
    SET job_status = 'CANCELLED',
        request_payload = NULL,
        lease_claim_id = NULL, lease_owner_id = NULL,
        lease_expires_at = NULL, lease_fencing_token = NULL,
        cancellation_key_hash = p_cancellation_key_hash,
        cancellation_code = 'etl_job_cancelled_by_owner',
        job_cancelled_at = clock_timestamp(),
        updated_at = clock_timestamp()
    FROM (
        SELECT r.job_record_id, r.job_status
        FROM public.etl_job_records r
        WHERE r.job_record_id = p_job_record_id AND r.principal_scope_hash = p_principal_scope_hash
          AND r.job_status IN ('PENDING', 'RUNNING')
        FOR UPDATE
    ) old
    WHERE j.job_record_id = old.job_record_id
      AND j.job_status IN ('PENDING', 'RUNNING')
    RETURNING old.job_status AS previous_status, j.job_record_id, j.job_kind, j.job_status, j.attempt_count,
              j.failure_code::text AS failure_code, j.cancellation_code, j.created_at, j.updated_at,
              j.request_digest::text AS request_digest, j.replay_source_job_record_id,
              j.replay_root_job_record_id, j.replay_generation_count
), dequeued AS (
    -- A cancelled job leaves the claim queue in the same statement.
    DELETE FROM public.etl_job_claim_queue q USING cancelled c
    WHERE q.job_record_id = c.job_record_id AND q.job_record_id = p_job_record_id
), lifecycle_events AS (
    INSERT INTO public.etl_outbox_events (event_kind, job_record_id, job_status, attempt_count, event_code)
    SELECT 'job_lifecycle', c.job_record_id, 'CANCELLED', c.attempt_count, 'etl_job_cancelled_by_owner'
    FROM cancelled c
), revocation_events AS (
    INSERT INTO public.etl_outbox_events (event_kind, job_record_id, job_status, attempt_count, event_code)
    SELECT 'lease_revoked', c.job_record_id, 'CANCELLED', c.attempt_count, 'etl_job_cancelled_by_owner'
    FROM cancelled c WHERE c.previous_status = 'RUNNING'
)
SELECT * FROM cancelled
$fn$;

CREATE OR REPLACE FUNCTION etl_operator_cancel_job(p_job_record_id uuid, p_operator_scope_hash text, p_cancellation_key_hash text)
RETURNS TABLE (previous_status text, job_record_id uuid, job_kind text, job_status text, attempt_count integer,
               failure_code text, cancellation_code text, created_at timestamptz, updated_at timestamptz,
               request_digest text, replay_source_job_record_id uuid, replay_root_job_record_id uuid,
               replay_generation_count integer)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $fn$
WITH cancelled AS (
    -- The lock, predicates and time source of etl_cancel_job (migration
    -- 00009), without the owner predicate: an operator may cancel any job.
    UPDATE public.etl_job_records j
    SET job_status = 'CANCELLED',
        request_payload = NULL,
        lease_claim_id = NULL, lease_owner_id = NULL,
        lease_expires_at = NULL, lease_fencing_token = NULL,
        cancellation_key_hash = p_cancellation_key_hash,
        cancellation_code = 'etl_job_cancelled_by_operator',
        job_cancelled_at = clock_timestamp(),
        updated_at = clock_timestamp()
    FROM (
        SELECT r.job_record_id, r.job_status
        FROM public.etl_job_records r
        WHERE r.job_record_id = p_job_record_id
          AND r.job_status IN ('PENDING', 'RUNNING')
        FOR UPDATE
    ) old
    WHERE j.job_record_id = old.job_record_id
      AND j.job_status IN ('PENDING', 'RUNNING')
    RETURNING old.job_status AS previous_status, j.job_record_id, j.job_kind, j.job_status, j.attempt_count,
              j.failure_code::text AS failure_code, j.cancellation_code, j.created_at, j.updated_at,
              j.request_digest::text AS request_digest, j.replay_source_job_record_id,
              j.replay_root_job_record_id, j.replay_generation_count
), dequeued AS (
    DELETE FROM public.etl_job_claim_queue q USING cancelled c
    WHERE q.job_record_id = c.job_record_id AND q.job_record_id = p_job_record_id
), lifecycle_events AS (
    INSERT INTO public.etl_outbox_events (event_kind, job_record_id, job_status, attempt_count, event_code,
                                          actor_principal_scope_hash)
    SELECT 'job_lifecycle', c.job_record_id, 'CANCELLED', c.attempt_count, 'etl_job_cancelled_by_operator',
           p_operator_scope_hash
    FROM cancelled c
), revocation_events AS (
    INSERT INTO public.etl_outbox_events (event_kind, job_record_id, job_status, attempt_count, event_code,
                                          actor_principal_scope_hash)
    SELECT 'lease_revoked', c.job_record_id, 'CANCELLED', c.attempt_count, 'etl_job_cancelled_by_operator',
           p_operator_scope_hash
    FROM cancelled c WHERE c.previous_status = 'RUNNING'
)
SELECT * FROM cancelled
$fn$;

CREATE OR REPLACE FUNCTION etl_ops_active_jobs(p_limit integer)
RETURNS TABLE (job_record_id uuid, job_kind text, job_status text, principal_scope_hash text,
               attempt_count integer, max_attempts integer, claimable_at timestamptz,
               lease_owner_id text, lease_expires_at timestamptz, created_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $fn$
SELECT j.job_record_id, j.job_kind, j.job_status, j.principal_scope_hash::text, j.attempt_count,
       j.max_attempts, q.claimable_at, j.lease_owner_id::text, j.lease_expires_at, j.created_at
FROM (SELECT q0.job_record_id, q0.claimable_at FROM public.etl_job_claim_queue q0
      ORDER BY q0.claimable_at, q0.job_record_id LIMIT p_limit) q
JOIN public.etl_job_records j ON j.job_record_id = q.job_record_id
WHERE j.job_status IN ('PENDING', 'RUNNING')
$fn$;

CREATE OR REPLACE FUNCTION etl_operator_replay_job(p_source uuid, p_operator_scope_hash text, p_replay_key_hash text,
                                        p_request_digest text, p_payload text, p_job_record_id uuid)
RETURNS TABLE (outcome text, job_record_id uuid, job_kind text, job_status text, attempt_count integer,
               failure_code text, cancellation_code text, created_at timestamptz, updated_at timestamptz,
               request_digest text, replay_source_job_record_id uuid, replay_root_job_record_id uuid,
               replay_generation_count integer)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $fn$
DECLARE
    v_kind text;
    v_status text;
    v_max_attempts integer;
    v_digest text;
    v_owner text;
    v_root uuid;
    v_generation integer;
    v_job uuid;
    v_available timestamptz;
    v_outcome text;
BEGIN
    SELECT s.job_kind, s.job_status, s.max_attempts, s.request_digest::text, s.principal_scope_hash::text,
           s.replay_root_job_record_id, s.replay_generation_count
    INTO v_kind, v_status, v_max_attempts, v_digest, v_owner, v_root, v_generation
    FROM public.etl_job_records s
    WHERE s.job_record_id = p_source
    FOR UPDATE;
    IF NOT FOUND THEN
        outcome := 'not_found';
        RETURN NEXT;
        RETURN;
    END IF;

    -- The job this key already made for the source's owner, read in a
    -- statement snapshot taken after the lock (it sees a concurrent winner
    -- that committed while this call waited).
    SELECT CASE WHEN k.replay_source_job_record_id = p_source AND k.request_digest::text = p_request_digest
                THEN 'replayed' ELSE 'key_reused' END, k.job_record_id
    INTO v_outcome, v_job
    FROM public.etl_job_records k
    WHERE k.principal_scope_hash = v_owner AND k.submission_key_hash = p_replay_key_hash;
    IF NOT FOUND THEN
        v_outcome := CASE
            WHEN v_status IN ('PENDING', 'RUNNING') THEN 'source_active'
            WHEN v_status = 'SUCCEEDED' THEN 'source_succeeded'
            WHEN v_digest <> p_request_digest THEN 'payload_mismatch'
            WHEN v_generation >= 100 THEN 'generation_exhausted'
        END;
        IF v_outcome IS NOT NULL THEN
            outcome := v_outcome;
            RETURN NEXT;
            RETURN;
        END IF;
        IF v_root IS NULL THEN
            v_root := p_source;
            v_generation := 1;
        ELSE
            v_generation := v_generation + 1;
        END IF;
        -- ON CONFLICT DO NOTHING on (principal_scope_hash,
        -- submission_key_hash): a concurrent replay of another source under
        -- the same key that committed after the lookup wins; this call then
        -- reads that job below and refuses or returns it.
        INSERT INTO public.etl_job_records AS j (job_record_id, job_kind, principal_scope_hash, submission_key_hash,
                                                 request_digest, request_payload, max_attempts,
                                                 replay_source_job_record_id, replay_root_job_record_id,
                                                 replay_generation_count)
        VALUES (p_job_record_id, v_kind, v_owner, p_replay_key_hash, p_request_digest, p_payload, v_max_attempts,
                p_source, v_root, v_generation)
        ON CONFLICT (principal_scope_hash, submission_key_hash) DO NOTHING
        RETURNING j.job_record_id, j.available_at INTO v_job, v_available;
        IF v_job IS NOT NULL THEN
            v_outcome := 'created';
            INSERT INTO public.etl_job_claim_queue (job_record_id, claimable_at) VALUES (v_job, v_available);
            INSERT INTO public.etl_outbox_events (event_kind, job_status, job_record_ids, attempt_counts,
                                                  actor_principal_scope_hash)
            VALUES ('job_available', 'PENDING', ARRAY[v_job], ARRAY[0], p_operator_scope_hash);
        ELSE
            SELECT CASE WHEN k.replay_source_job_record_id = p_source AND k.request_digest::text = p_request_digest
                        THEN 'replayed' ELSE 'key_reused' END, k.job_record_id
            INTO v_outcome, v_job
            FROM public.etl_job_records k
            WHERE k.principal_scope_hash = v_owner AND k.submission_key_hash = p_replay_key_hash;
            IF NOT FOUND THEN
                -- The winner's row vanished between the two statements;
                -- the caller may retry with the same key and body.
                RAISE EXCEPTION 'the job holding the replay key vanished' USING ERRCODE = 'serialization_failure';
            END IF;
        END IF;
    END IF;
    IF v_outcome = 'key_reused' THEN
        outcome := v_outcome;
        RETURN NEXT;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT v_outcome, r.job_record_id, r.job_kind::text, r.job_status::text, r.attempt_count,
           r.failure_code::text, r.cancellation_code::text, r.created_at, r.updated_at,
           r.request_digest::text, r.replay_source_job_record_id, r.replay_root_job_record_id,
           r.replay_generation_count
    FROM public.etl_job_records r
    WHERE r.job_record_id = v_job;
END
$fn$;
-- +goose StatementEnd
