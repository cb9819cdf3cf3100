-- Replay lineage without the owner-scoped identity index.
--
-- 00003 made every replay reference a job of the same owner with composite
-- foreign keys on (job_record_id, principal_scope_hash), which need a unique
-- index on that pair: every job insert paid one more unique-index entry of a
-- uuid and a 64-character hex text, though only replays (rare) ever use it.
-- Now the foreign keys reference the primary key alone (RESTRICT, so a
-- referenced job still cannot be deleted), and a trigger that fires only for
-- rows with lineage checks that the source and root belong to the same owner,
-- raising the same foreign_key_violation (23503) the composite keys raised.
-- Lineage never changes after insert (the 00003 guard), so the check at
-- insert holds for the row's life; the owner of a job never changes either
-- (no role may update principal_scope_hash, and a second trigger refuses it
-- outright, off the hot path: it fires only when that column is assigned).

-- +goose Up
-- +goose StatementBegin
ALTER TABLE etl_job_records
    DROP CONSTRAINT etl_job_replay_source_owner_fk,
    DROP CONSTRAINT etl_job_replay_root_owner_fk,
    DROP CONSTRAINT etl_job_owner_scoped_identity_unique;
ALTER TABLE etl_job_records
    ADD CONSTRAINT etl_job_replay_source_fk FOREIGN KEY (replay_source_job_record_id)
        REFERENCES etl_job_records (job_record_id) ON DELETE RESTRICT,
    ADD CONSTRAINT etl_job_replay_root_fk FOREIGN KEY (replay_root_job_record_id)
        REFERENCES etl_job_records (job_record_id) ON DELETE RESTRICT;

CREATE FUNCTION etl_job_replay_owner_guard() RETURNS trigger LANGUAGE plpgsql AS $fn$
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
CREATE TRIGGER etl_job_replay_owner_guard_trigger
    BEFORE INSERT ON etl_job_records
    FOR EACH ROW
    WHEN (NEW.replay_source_job_record_id IS NOT NULL OR NEW.replay_root_job_record_id IS NOT NULL)
    EXECUTE FUNCTION etl_job_replay_owner_guard();

CREATE FUNCTION etl_job_owner_immutable_guard() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    RAISE EXCEPTION 'the owner of a job never changes' USING ERRCODE = 'integrity_constraint_violation';
END;
$fn$;
CREATE TRIGGER etl_job_owner_immutable_guard_trigger
    BEFORE UPDATE OF principal_scope_hash ON etl_job_records
    FOR EACH ROW
    WHEN (OLD.principal_scope_hash IS DISTINCT FROM NEW.principal_scope_hash)
    EXECUTE FUNCTION etl_job_owner_immutable_guard();
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DROP TRIGGER IF EXISTS etl_job_owner_immutable_guard_trigger ON etl_job_records;
DROP FUNCTION IF EXISTS etl_job_owner_immutable_guard();
DROP TRIGGER IF EXISTS etl_job_replay_owner_guard_trigger ON etl_job_records;
DROP FUNCTION IF EXISTS etl_job_replay_owner_guard();
ALTER TABLE etl_job_records
    DROP CONSTRAINT etl_job_replay_source_fk,
    DROP CONSTRAINT etl_job_replay_root_fk;
ALTER TABLE etl_job_records ADD CONSTRAINT etl_job_owner_scoped_identity_unique
    UNIQUE (job_record_id, principal_scope_hash);
ALTER TABLE etl_job_records
    ADD CONSTRAINT etl_job_replay_source_owner_fk
        FOREIGN KEY (replay_source_job_record_id, principal_scope_hash)
        REFERENCES etl_job_records (job_record_id, principal_scope_hash) ON DELETE RESTRICT,
    ADD CONSTRAINT etl_job_replay_root_owner_fk
        FOREIGN KEY (replay_root_job_record_id, principal_scope_hash)
        REFERENCES etl_job_records (job_record_id, principal_scope_hash) ON DELETE RESTRICT;
-- +goose StatementEnd
