-- Replay lineage kept by triggers instead of foreign keys (issue 11).
--
-- etl_job_replay_source_fk and etl_job_replay_root_fk (00007) made every
-- inserted job queue two foreign-key checks, run after the statement and
-- skipped only once they had fetched the new row and found its lineage
-- NULL, which it is for every job but a replay. Measured: inserting 300,000
-- jobs in statements of 2,000, one connection, alternating, 28.8 and 26.2 us
-- per job without the keys against 32.1 and 28.0 with them.
--
-- The two things the keys did are now done where only lineage pays:
--   * Insert: the owner guard (00007), which fires only for rows with
--     lineage, already read the source and the root to check their owner.
--     It now also locks them FOR KEY SHARE, the lock a foreign-key check
--     takes, so a concurrent delete of either waits for the insert to end
--     and then finds the reference; a row being deleted makes the insert
--     wait, and a deleted one is missing (23503, as before).
--   * Delete: a statement trigger refuses (23503, constraint named as the
--     key was) a DELETE that leaves a job's lineage pointing at a deleted
--     job. It runs after the statement, as the keys' checks did, so a
--     statement that deletes a replay with its source passes, and it finds
--     references through the partial lineage indexes, so it reads only
--     replays. A job's id never changes (a third trigger refuses it; only
--     fires when the column is assigned), so no update can orphan one.
-- Lineage never changes after insert (00003's guard).
--
-- Down adds the keys back (validating every row) and the former guard.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION etl_job_replay_owner_guard() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    -- FOR KEY SHARE, as a foreign-key check: the source and root cannot be
    -- deleted until this insert's transaction ends, and one being deleted
    -- makes this wait and then find it gone.
    PERFORM 1 FROM etl_job_records s
    WHERE s.job_record_id = NEW.replay_source_job_record_id
      AND s.principal_scope_hash = NEW.principal_scope_hash
    FOR KEY SHARE;
    IF FOUND THEN
        PERFORM 1 FROM etl_job_records r
        WHERE r.job_record_id = NEW.replay_root_job_record_id
          AND r.principal_scope_hash = NEW.principal_scope_hash
        FOR KEY SHARE;
    END IF;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'a replay references only jobs of its own owner'
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'etl_job_replay_owner_check';
    END IF;
    RETURN NEW;
END;
$fn$;

CREATE FUNCTION etl_job_replay_reference_guard() RETURNS trigger LANGUAGE plpgsql AS $fn$
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
CREATE TRIGGER etl_job_replay_reference_guard_trigger
    AFTER DELETE ON etl_job_records
    REFERENCING OLD TABLE AS deleted_job_rows
    FOR EACH STATEMENT EXECUTE FUNCTION etl_job_replay_reference_guard();

CREATE FUNCTION etl_job_id_immutable_guard() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    RAISE EXCEPTION 'the id of a job never changes' USING ERRCODE = 'integrity_constraint_violation';
END;
$fn$;
CREATE TRIGGER etl_job_id_immutable_guard_trigger
    BEFORE UPDATE OF job_record_id ON etl_job_records
    FOR EACH ROW
    WHEN (OLD.job_record_id IS DISTINCT FROM NEW.job_record_id)
    EXECUTE FUNCTION etl_job_id_immutable_guard();

ALTER TABLE etl_job_records
    DROP CONSTRAINT etl_job_replay_source_fk,
    DROP CONSTRAINT etl_job_replay_root_fk;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DROP TRIGGER etl_job_id_immutable_guard_trigger ON etl_job_records;
DROP FUNCTION etl_job_id_immutable_guard();
DROP TRIGGER etl_job_replay_reference_guard_trigger ON etl_job_records;
DROP FUNCTION etl_job_replay_reference_guard();
ALTER TABLE etl_job_records
    ADD CONSTRAINT etl_job_replay_source_fk FOREIGN KEY (replay_source_job_record_id)
        REFERENCES etl_job_records (job_record_id) ON DELETE RESTRICT,
    ADD CONSTRAINT etl_job_replay_root_fk FOREIGN KEY (replay_root_job_record_id)
        REFERENCES etl_job_records (job_record_id) ON DELETE RESTRICT;
CREATE OR REPLACE FUNCTION etl_job_replay_owner_guard() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM etl_job_records s
                   WHERE s.job_record_id = NEW.replay_source_job_record_id
                     AND s.principal_scope_hash = NEW.principal_scope_hash)
       OR NOT EXISTS (SELECT 1 FROM etl_job_records r
                      WHERE r.job_record_id = NEW.replay_root_job_record_id
                        AND r.principal_scope_hash = NEW.principal_scope_hash) THEN
        RAISE EXCEPTION 'a replay references only jobs of its own owner'
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'etl_job_replay_owner_check';
    END IF;
    RETURN NEW;
END;
$fn$;
-- +goose StatementEnd
