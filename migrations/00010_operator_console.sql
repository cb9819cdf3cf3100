-- Operator console (issue 14): the operator's cancellation and the reads the
-- console needs beyond the intake's column grants, as SECURITY DEFINER
-- functions, so the intake role still never selects a payload or a lease
-- column and never updates a job row.
--
-- Nothing here touches the hot path: no new index on etl_job_records, no
-- trigger, no column written by claim, renewal or finish. The one new column
-- is on the outbox (insert-only, never indexed, NULL except on an operator's
-- cancellation rows).
--
-- 1. cancellation_code accepts etl_job_cancelled_by_operator beside
--    etl_job_cancelled_by_owner.
-- 2. etl_outbox_events.actor_principal_scope_hash: the principal scope hash
--    of the operator whose action wrote the row (NULL for every other row).
-- 3. etl_operator_cancel_job: the statement of etl_cancel_job (same lock,
--    predicates, time source, queue delete, outbox rows) for any owner's job,
--    with the operator's code and hash.
-- 4. Bounded reads: etl_ops_job_private (one row: lease owner, expiry,
--    fencing token, record count of the payload, the database clock),
--    etl_ops_active_jobs (PENDING/RUNNING jobs found through the narrow claim
--    queue, at most p_limit), and etl_ops_counters (two O(1) cumulative
--    counters for the claim and finish rates), etl_ops_outbox_backlog.

-- +goose Up
-- +goose StatementBegin
ALTER TABLE etl_job_records DROP CONSTRAINT etl_job_cancellation_code_check;
ALTER TABLE etl_job_records ADD CONSTRAINT etl_job_cancellation_code_check
    CHECK (cancellation_code IN ('etl_job_cancelled_by_owner', 'etl_job_cancelled_by_operator'));

ALTER TABLE etl_outbox_events ADD COLUMN actor_principal_scope_hash text;
ALTER TABLE etl_outbox_events ADD CONSTRAINT etl_outbox_actor_principal_scope_hash_format_check
    CHECK (octet_length(actor_principal_scope_hash) = 64 AND actor_principal_scope_hash !~ '[^0-9a-f]');

CREATE FUNCTION etl_operator_cancel_job(p_job_record_id uuid, p_operator_scope_hash text, p_cancellation_key_hash text)
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
REVOKE EXECUTE ON FUNCTION etl_operator_cancel_job(uuid, text, text) FROM PUBLIC;

-- One job's private columns, by primary key: a single-row read. The record
-- count parses the payload of that one row (PENDING/RUNNING only: terminal
-- rows keep no payload); the payload itself never leaves the function.
CREATE FUNCTION etl_ops_job_private(p_job_record_id uuid)
RETURNS TABLE (lease_owner_id text, lease_expires_at timestamptz, lease_fencing_token bigint,
               record_count integer, database_now timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $fn$
SELECT j.lease_owner_id::text, j.lease_expires_at, j.lease_fencing_token,
       CASE
           WHEN j.request_payload IS NULL THEN NULL
           WHEN jsonb_typeof(j.request_payload::jsonb) = 'array' THEN jsonb_array_length(j.request_payload::jsonb)
           WHEN jsonb_typeof(j.request_payload::jsonb -> 'records') = 'array'
               THEN jsonb_array_length(j.request_payload::jsonb -> 'records')
       END,
       clock_timestamp()
FROM public.etl_job_records j
WHERE j.job_record_id = p_job_record_id
$fn$;
REVOKE EXECUTE ON FUNCTION etl_ops_job_private(uuid) FROM PUBLIC;

-- The PENDING and RUNNING jobs, found through etl_job_claim_queue (one
-- narrow row per PENDING/RUNNING job) in claimable_at order over its
-- eligibility index, at most p_limit of them, each joined to its job row by
-- primary key. Terminal rows are never visited, whatever the table size.
CREATE FUNCTION etl_ops_active_jobs(p_limit integer)
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
REVOKE EXECUTE ON FUNCTION etl_ops_active_jobs(integer) FROM PUBLIC;

-- Cumulative counters, each O(1): claims ever made (the fencing sequence
-- hands one token to every claim) and claim-queue rows ever deleted (every
-- terminal transition deletes its job's queue row: success, failure,
-- exhaustion, cancellation), from the statistics collector.
CREATE FUNCTION etl_ops_counters()
RETURNS TABLE (claims_total bigint, finishes_total bigint, database_now timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $fn$
SELECT (SELECT s.last_value FROM public.etl_lease_fencing_token_sequence s WHERE s.is_called),
       (SELECT t.n_tup_del FROM pg_catalog.pg_stat_user_tables t
        WHERE t.relid = 'public.etl_job_claim_queue'::regclass),
       clock_timestamp()
$fn$;
REVOKE EXECUTE ON FUNCTION etl_ops_counters() FROM PUBLIC;

-- Outbox backlog for the overview: rows of each class counted through the
-- partial pending indexes of migration 00008, at most p_cap each, and the
-- oldest lifecycle row's time (the head of its index).
CREATE FUNCTION etl_ops_outbox_backlog(p_cap integer)
RETURNS TABLE (lifecycle_rows bigint, advisory_rows bigint, oldest_lifecycle_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $fn$
SELECT (SELECT count(*) FROM (SELECT FROM public.etl_outbox_events
                              WHERE event_kind = 'job_lifecycle' LIMIT p_cap) l),
       (SELECT count(*) FROM (SELECT FROM public.etl_outbox_events
                              WHERE event_kind IN ('job_available', 'lease_revoked') LIMIT p_cap) a),
       (SELECT o.occurred_at FROM public.etl_outbox_events o
        WHERE o.event_kind = 'job_lifecycle' ORDER BY o.outbox_event_id LIMIT 1)
$fn$;
REVOKE EXECUTE ON FUNCTION etl_ops_outbox_backlog(integer) FROM PUBLIC;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $guard$
BEGIN
    IF EXISTS (SELECT 1 FROM etl_job_records WHERE cancellation_code = 'etl_job_cancelled_by_operator') THEN
        RAISE EXCEPTION 'cannot roll back the operator console migration while operator-cancelled jobs exist; prune or archive them first'
            USING ERRCODE = 'object_in_use';
    END IF;
END
$guard$;
DROP FUNCTION IF EXISTS etl_ops_outbox_backlog(integer);
DROP FUNCTION IF EXISTS etl_ops_counters();
DROP FUNCTION IF EXISTS etl_ops_active_jobs(integer);
DROP FUNCTION IF EXISTS etl_ops_job_private(uuid);
DROP FUNCTION IF EXISTS etl_operator_cancel_job(uuid, text, text);
ALTER TABLE etl_outbox_events DROP CONSTRAINT etl_outbox_actor_principal_scope_hash_format_check;
ALTER TABLE etl_outbox_events DROP COLUMN actor_principal_scope_hash;
ALTER TABLE etl_job_records DROP CONSTRAINT etl_job_cancellation_code_check;
ALTER TABLE etl_job_records ADD CONSTRAINT etl_job_cancellation_code_check
    CHECK (cancellation_code IN ('etl_job_cancelled_by_owner'));
-- +goose StatementEnd
