-- Trigger functions resolve names in schema public only, and jobs are
-- deleted only at READ COMMITTED (issue 29, defects 6 and 2).
--
-- 1. search_path.
-- A trigger function runs with the search_path of the session that fired it,
-- and every session's search_path begins, implicitly, with its own temporary
-- schema. PUBLIC may create temporary tables by default, so a role with the
-- intake's grants could create a temporary etl_job_records holding another
-- owner's job id under its own principal hash and then insert into
-- public.etl_job_records a replay of that job: the owner guard (00007,
-- 00017) read the temporary table and let it through.
--
-- Every trigger function of the migrations now runs with
-- search_path = pg_catalog, public, pg_temp, as the SECURITY DEFINER
-- functions (00009 to 00015) already do: pg_temp named last is searched last
-- (and never for functions or operators), so an unqualified table name is
-- the mightyETL table in public. A trigger's transition table
-- (deleted_job_rows, inserted_outbox_rows) is found before any schema, as
-- before. Schema public is where the migrations create every object and what
-- the SECURITY DEFINER functions and deploy/postgres/least-privilege.sql
-- name. The functions that read no table (the notify and immutability
-- guards) are pinned too, so the rule has no exception; the immutability
-- guards run only when their trigger's WHEN finds a violation.
-- deploy/postgres/least-privilege.sql also revokes TEMPORARY on the database
-- from PUBLIC.
--
-- 2. Isolation of a delete. 00017's after-delete guard looks for replays of
-- the deleted jobs with the transaction's snapshot. Under REPEATABLE READ or
-- SERIALIZABLE that snapshot is the transaction's first, so it misses a
-- replay that committed after it: prune's own statement, run in such a
-- transaction, deleted a replay's source and left the replay pointing at a
-- deleted job (replaying it then failed with 23503). A foreign key's check
-- would have used a fresh snapshot and refused. The guard now refuses
-- (40001, serialization_failure, so a caller retries) a delete of any job in
-- a transaction at another level than READ COMMITTED, where each of its
-- lookups takes a snapshot of its own (READ UNCOMMITTED is READ COMMITTED in
-- PostgreSQL). A statement that deletes nothing is not refused. The product's
-- deletes (pg.PruneTerminalJobs) and replays begin their transactions at
-- READ COMMITTED explicitly, whatever default_transaction_isolation says.
-- The insert side needs no such check: the owner guard locks the source and
-- root FOR KEY SHARE, which fails with 40001 under REPEATABLE READ or
-- SERIALIZABLE when either was deleted after the snapshot.
--
-- Down restores 00017's reference guard and resets the functions'
-- search_path, which restores 00017's definitions.

-- +goose Up
-- +goose StatementBegin
ALTER FUNCTION etl_outbox_notify_relay() SET search_path = pg_catalog, public, pg_temp;
ALTER FUNCTION etl_outbox_notify_relay_when_inserted() SET search_path = pg_catalog, public, pg_temp;
ALTER FUNCTION etl_job_replay_lineage_guard() SET search_path = pg_catalog, public, pg_temp;
ALTER FUNCTION etl_job_claim_queue_cascade() SET search_path = pg_catalog, public, pg_temp;
ALTER FUNCTION etl_job_replay_owner_guard() SET search_path = pg_catalog, public, pg_temp;
ALTER FUNCTION etl_job_owner_immutable_guard() SET search_path = pg_catalog, public, pg_temp;
CREATE OR REPLACE FUNCTION etl_job_replay_reference_guard() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $fn$
BEGIN
    -- Only at READ COMMITTED do the lookups below take a snapshot of their
    -- own, which sees a replay committed after this transaction began.
    IF current_setting('transaction_isolation') NOT IN ('read committed', 'read uncommitted')
       AND EXISTS (SELECT 1 FROM deleted_job_rows) THEN
        RAISE EXCEPTION 'jobs can be deleted only at READ COMMITTED isolation, not %',
                current_setting('transaction_isolation')
            USING ERRCODE = 'serialization_failure',
                  DETAIL = 'The replay lineage check reads the transaction''s snapshot at this isolation level and would miss a replay committed since.',
                  HINT = 'Run the DELETE in a READ COMMITTED transaction.';
    END IF;
    IF EXISTS (SELECT 1 FROM deleted_job_rows d
               JOIN etl_job_records r ON r.replay_source_job_record_id = d.job_record_id) THEN
        RAISE EXCEPTION 'a job that a replay was made from cannot be deleted before the replay'
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'etl_job_replay_source_fk';
    END IF;
    IF EXISTS (SELECT 1 FROM deleted_job_rows d
               JOIN etl_job_records r ON r.replay_root_job_record_id = d.job_record_id) THEN
        RAISE EXCEPTION 'the first job of a replay chain cannot be deleted before its replays'
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'etl_job_replay_root_fk';
    END IF;
    RETURN NULL;
END;
$fn$;
ALTER FUNCTION etl_job_id_immutable_guard() SET search_path = pg_catalog, public, pg_temp;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION etl_job_replay_reference_guard() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF EXISTS (SELECT 1 FROM deleted_job_rows d
               JOIN etl_job_records r ON r.replay_source_job_record_id = d.job_record_id) THEN
        RAISE EXCEPTION 'a job that a replay was made from cannot be deleted before the replay'
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'etl_job_replay_source_fk';
    END IF;
    IF EXISTS (SELECT 1 FROM deleted_job_rows d
               JOIN etl_job_records r ON r.replay_root_job_record_id = d.job_record_id) THEN
        RAISE EXCEPTION 'the first job of a replay chain cannot be deleted before its replays'
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'etl_job_replay_root_fk';
    END IF;
    RETURN NULL;
END;
$fn$;
ALTER FUNCTION etl_outbox_notify_relay() RESET search_path;
ALTER FUNCTION etl_outbox_notify_relay_when_inserted() RESET search_path;
ALTER FUNCTION etl_job_replay_lineage_guard() RESET search_path;
ALTER FUNCTION etl_job_claim_queue_cascade() RESET search_path;
ALTER FUNCTION etl_job_replay_owner_guard() RESET search_path;
ALTER FUNCTION etl_job_owner_immutable_guard() RESET search_path;
ALTER FUNCTION etl_job_replay_reference_guard() RESET search_path;
ALTER FUNCTION etl_job_id_immutable_guard() RESET search_path;
-- +goose StatementEnd
