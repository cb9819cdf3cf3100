-- Operator replay (issue 14, item 4): an operator replays any owner's FAILED
-- or CANCELLED job, as a SECURITY DEFINER function, so the intake role keeps
-- its column grants (the source lock of another owner's row and the insert
-- for that owner happen inside the function only).
--
-- Terminal rows keep no payload (design, section 3), so the operator resends
-- the original body, exactly as the owner's replay does (contract.md,
-- "Replay"); the caller passes its SHA-256 hex and the function requires it
-- to equal the source's request_digest before anything is written.
--
-- etl_operator_replay_job applies the rules of pg.ReplayJob
-- (internal/pg/jobs_replay.go) for the SOURCE's owner instead of the caller:
--   * lock: SELECT ... FOR UPDATE of the source serialises every replay of
--     one source (a concurrent request with the same key waits and then
--     finds the winner's job) and holds off any UPDATE of the source until
--     the replay commits, so the lineage guard of such an UPDATE sees the
--     new reference (migration 00003). Terminal rows are never written by
--     the claim, renew, finish or cancel paths, so no worker waits on it;
--   * the replay key hash is the new job's submission_key_hash under the
--     source's owner: a key that already made a job returns that job
--     ('replayed') when it replays this source with this digest, whatever
--     the source's state now, and is refused ('key_reused') otherwise;
--   * source PENDING or RUNNING: 'source_active'; SUCCEEDED:
--     'source_succeeded'; digest differs: 'payload_mismatch'; source of
--     generation 100: 'generation_exhausted'; nothing is written;
--   * otherwise ('created') the new PENDING job with the source's kind and
--     max_attempts, lineage generation 1 rooted at the source (a source
--     without lineage) or the source's generation + 1 with the source's root
--     (the completeness check of 00003 and the owner trigger of 00007 hold
--     it), its claim-queue row and its job_available outbox row, written as
--     internal/pg/jobs.go insertJobsSQL writes them, plus the operator's
--     principal scope hash in actor_principal_scope_hash (migration 00010)
--     on that outbox row only: the relay never publishes that column.
-- An absent source is 'not_found'. Refusals return one row with only the
-- outcome set. search_path is fixed so a caller's objects cannot stand in
-- for the tables; EXECUTE is revoked from PUBLIC.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION etl_operator_replay_job(p_source uuid, p_operator_scope_hash text, p_replay_key_hash text,
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
REVOKE EXECUTE ON FUNCTION etl_operator_replay_job(uuid, text, text, text, text, uuid) FROM PUBLIC;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
-- Nothing to refuse: the jobs an operator's replay created are ordinary
-- replay jobs of their source's owner (the lineage checks of 00003 and 00007
-- hold without this function), and the operator's hash lives in the outbox
-- column of 00010, which stays.
DROP FUNCTION IF EXISTS etl_operator_replay_job(uuid, text, text, text, text, uuid);
-- +goose StatementEnd
