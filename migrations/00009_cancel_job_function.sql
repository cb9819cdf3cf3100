-- Cancellation as a SECURITY DEFINER function (issue 13, item 7).
--
-- The owner's cancellation clears the job's payload and every lease column
-- (lease_claim_id, lease_owner_id, lease_expires_at, lease_fencing_token) in
-- the statement that moves it to CANCELLED. Column privileges cannot say
-- "may set these columns to NULL only", so an intake role allowed to run that
-- UPDATE could also write any lease, fencing token or payload. Now the
-- statement lives here, in a function that runs with its owner's rights (the
-- migrator role under deploy/postgres/least-privilege.sql), and the intake
-- role gets EXECUTE on it and no UPDATE on the job rows at all.
--
-- The statement is the one internal/pg/jobs_cancel.go ran until now, with the
-- same lock, predicates, time source and outbox rows; see the comment on
-- cancelSQL there. Only the owner's own job (job id AND principal scope hash)
-- can match, whoever calls. search_path is fixed so a caller's schema or
-- temporary objects cannot stand in for the tables. EXECUTE is revoked from
-- PUBLIC: functions are executable by everyone by default.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION etl_cancel_job(p_job_record_id uuid, p_principal_scope_hash text, p_cancellation_key_hash text)
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
REVOKE EXECUTE ON FUNCTION etl_cancel_job(uuid, text, text) FROM PUBLIC;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DROP FUNCTION IF EXISTS etl_cancel_job(uuid, text, text);
-- +goose StatementEnd
