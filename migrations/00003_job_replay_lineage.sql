-- Replay lineage: a replay is a NEW job that points at its source (a FAILED
-- or CANCELLED job of the same owner) and at the root of its chain. Lineage
-- is immutable after insert, and a referenced source's terminal evidence is
-- frozen, so the record of what happened can never be rewritten.

-- +goose Up
-- +goose StatementBegin
ALTER TABLE etl_job_records
    ADD COLUMN replay_source_job_record_id uuid,
    ADD COLUMN replay_root_job_record_id   uuid,
    ADD COLUMN replay_generation_count     integer;

-- Target of the owner-scoped composite foreign keys.
ALTER TABLE etl_job_records ADD CONSTRAINT etl_job_owner_scoped_identity_unique
    UNIQUE (job_record_id, principal_scope_hash);

-- A replay can only reference a job of the same owner; a referenced job can
-- never be deleted (RESTRICT), so pruning cannot break a chain.
ALTER TABLE etl_job_records ADD CONSTRAINT etl_job_replay_source_owner_fk
    FOREIGN KEY (replay_source_job_record_id, principal_scope_hash)
    REFERENCES etl_job_records (job_record_id, principal_scope_hash) ON DELETE RESTRICT;
ALTER TABLE etl_job_records ADD CONSTRAINT etl_job_replay_root_owner_fk
    FOREIGN KEY (replay_root_job_record_id, principal_scope_hash)
    REFERENCES etl_job_records (job_record_id, principal_scope_hash) ON DELETE RESTRICT;

-- All three lineage columns or none; generation 1..100; no self reference.
ALTER TABLE etl_job_records ADD CONSTRAINT etl_job_replay_lineage_completeness_check CHECK (
    (replay_source_job_record_id IS NULL AND replay_root_job_record_id IS NULL AND replay_generation_count IS NULL)
    OR
    (replay_source_job_record_id IS NOT NULL AND replay_root_job_record_id IS NOT NULL
        -- explicit: BETWEEN on NULL is NULL, which a CHECK lets through
        AND replay_generation_count IS NOT NULL
        AND replay_generation_count BETWEEN 1 AND 100
        AND replay_source_job_record_id <> job_record_id
        AND replay_root_job_record_id <> job_record_id
        -- generation 1 points at its root directly; a later generation's
        -- source is itself a replay, never the root.
        AND (replay_generation_count = 1) = (replay_root_job_record_id = replay_source_job_record_id)));

CREATE INDEX etl_job_replay_source_lookup_index ON etl_job_records (replay_source_job_record_id)
    WHERE replay_source_job_record_id IS NOT NULL;
CREATE INDEX etl_job_replay_root_lookup_index ON etl_job_records (replay_root_job_record_id)
    WHERE replay_root_job_record_id IS NOT NULL;

-- The guard. Evidence is everything the owner can see of a terminal run
-- (status, codes, attempts, timestamps: the status object and its ETag) plus
-- the identity, digest and key hashes; available_at alone is free. Race:
-- the EXISTS runs on a fresh READ COMMITTED snapshot after the row lock, and
-- the replay transaction holds FOR UPDATE on its source until it commits, so
-- an UPDATE that waited on that lock sees the new reference. (An INSERT of a
-- lineage row by hand takes only the FK's KEY SHARE lock and is not covered.)
CREATE FUNCTION etl_job_replay_lineage_guard() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF OLD.replay_source_job_record_id IS DISTINCT FROM NEW.replay_source_job_record_id
        OR OLD.replay_root_job_record_id IS DISTINCT FROM NEW.replay_root_job_record_id
        OR OLD.replay_generation_count IS DISTINCT FROM NEW.replay_generation_count THEN
        RAISE EXCEPTION 'replay lineage is immutable' USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF OLD.job_status IN ('FAILED', 'CANCELLED')
        AND (OLD.job_status, OLD.failure_code, OLD.cancellation_code, OLD.cancellation_key_hash,
             OLD.job_cancelled_at, OLD.request_digest, OLD.attempt_count, OLD.max_attempts,
             OLD.principal_scope_hash, OLD.submission_key_hash, OLD.created_at, OLD.updated_at,
             OLD.job_kind)
            IS DISTINCT FROM
            (NEW.job_status, NEW.failure_code, NEW.cancellation_code, NEW.cancellation_key_hash,
             NEW.job_cancelled_at, NEW.request_digest, NEW.attempt_count, NEW.max_attempts,
             NEW.principal_scope_hash, NEW.submission_key_hash, NEW.created_at, NEW.updated_at,
             NEW.job_kind)
        AND EXISTS (SELECT 1 FROM etl_job_records r
                    WHERE r.replay_source_job_record_id = OLD.job_record_id
                       OR r.replay_root_job_record_id = OLD.job_record_id) THEN
        RAISE EXCEPTION 'the terminal evidence of a replayed job is frozen' USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$fn$;

-- WHEN keeps the hot path (claim, renew, finish of PENDING/RUNNING rows)
-- free of any trigger call: only lineage edits and updates of terminal rows
-- reach the function.
CREATE TRIGGER etl_job_replay_lineage_guard_trigger
    BEFORE UPDATE ON etl_job_records
    FOR EACH ROW
    WHEN (OLD.job_status IN ('FAILED', 'CANCELLED')
          OR OLD.replay_source_job_record_id IS DISTINCT FROM NEW.replay_source_job_record_id
          OR OLD.replay_root_job_record_id IS DISTINCT FROM NEW.replay_root_job_record_id
          OR OLD.replay_generation_count IS DISTINCT FROM NEW.replay_generation_count)
    EXECUTE FUNCTION etl_job_replay_lineage_guard();
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
-- Dropping the columns would erase lineage that the guard keeps immutable;
-- refuse (like 00002) until replay jobs are pruned or archived.
DO $guard$
BEGIN
    IF EXISTS (SELECT 1 FROM etl_job_records WHERE replay_source_job_record_id IS NOT NULL) THEN
        RAISE EXCEPTION 'cannot roll back the replay lineage migration while replay jobs exist; prune or archive them first'
            USING ERRCODE = 'object_in_use';
    END IF;
END
$guard$;
DROP TRIGGER IF EXISTS etl_job_replay_lineage_guard_trigger ON etl_job_records;
DROP FUNCTION IF EXISTS etl_job_replay_lineage_guard();
DROP INDEX IF EXISTS etl_job_replay_root_lookup_index;
DROP INDEX IF EXISTS etl_job_replay_source_lookup_index;
ALTER TABLE etl_job_records DROP CONSTRAINT IF EXISTS etl_job_replay_lineage_completeness_check;
ALTER TABLE etl_job_records DROP CONSTRAINT IF EXISTS etl_job_replay_root_owner_fk;
ALTER TABLE etl_job_records DROP CONSTRAINT IF EXISTS etl_job_replay_source_owner_fk;
ALTER TABLE etl_job_records DROP CONSTRAINT IF EXISTS etl_job_owner_scoped_identity_unique;
ALTER TABLE etl_job_records
    DROP COLUMN replay_generation_count,
    DROP COLUMN replay_root_job_record_id,
    DROP COLUMN replay_source_job_record_id;
-- +goose StatementEnd
