-- +goose NO TRANSACTION
-- Admits the job kind etl_chunked (issue 32; migration 00023 has the tables).
--
-- etl_job_kind_check is replaced by a wider check, added NOT VALID (a
-- catalog change under a brief ACCESS EXCLUSIVE lock, bounded by
-- lock_timeout), then validated in its own statement under SHARE UPDATE
-- EXCLUSIVE, which lets the fleet's reads and writes go on. No transaction
-- (goose NO TRANSACTION), so SET rather than SET LOCAL: it holds for this
-- migration's connection, which the runner closes afterwards. Re-runnable
-- from its first statement (the runner retries a file that fails on a lock
-- timeout).
--
-- Binaries of level 1 keep running on this schema: they never insert or
-- claim a chunked job (those live in etl_chunked_job_queue, never in
-- etl_job_claim_queue). The down refuses while any chunked job exists: the
-- narrower check it restores admits none.

-- +goose Up
SET lock_timeout = '1s';
SET statement_timeout = '5s';
ALTER TABLE etl_job_records
    DROP CONSTRAINT IF EXISTS etl_job_kind_check,
    ADD CONSTRAINT etl_job_kind_check CHECK (job_kind IN ('etl_records', 'diagnostic', 'etl_chunked')) NOT VALID;
SET statement_timeout = '30min';
ALTER TABLE etl_job_records VALIDATE CONSTRAINT etl_job_kind_check;
SET statement_timeout = '5s';
INSERT INTO etl_schema_compatibility (schema_version, oldest_compatible_binary) VALUES (24, 1)
ON CONFLICT (schema_version) DO NOTHING;

-- +goose Down
SET lock_timeout = '1s';
SET statement_timeout = '5min';
-- +goose StatementBegin
DO $guard$
BEGIN
    IF EXISTS (SELECT 1 FROM etl_job_records WHERE job_kind = 'etl_chunked') THEN
        RAISE EXCEPTION 'chunked jobs exist; cancel or finish them and delete their rows before migrating below 24';
    END IF;
END
$guard$;
-- +goose StatementEnd
SET statement_timeout = '5s';
ALTER TABLE etl_job_records
    DROP CONSTRAINT IF EXISTS etl_job_kind_check,
    ADD CONSTRAINT etl_job_kind_check CHECK (job_kind IN ('etl_records', 'diagnostic')) NOT VALID;
SET statement_timeout = '30min';
ALTER TABLE etl_job_records VALIDATE CONSTRAINT etl_job_kind_check;
SET statement_timeout = '5s';
DELETE FROM etl_schema_compatibility WHERE schema_version = 24;
