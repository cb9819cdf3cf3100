-- Cancellation: CANCELLED joins the lifecycle as a terminal state with its
-- own evidence columns (key hash, stable code, database time), all three iff
-- CANCELLED. Like every terminal row, a CANCELLED row has no payload and no lease.

-- +goose Up
-- +goose StatementBegin
ALTER TABLE etl_job_records
    ADD COLUMN cancellation_key_hash text,
    ADD COLUMN cancellation_code     text,
    ADD COLUMN job_cancelled_at      timestamptz;

ALTER TABLE etl_job_records DROP CONSTRAINT etl_job_status_check;
ALTER TABLE etl_job_records ADD CONSTRAINT etl_job_status_check
    CHECK (job_status IN ('PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED'));
ALTER TABLE etl_job_records ADD CONSTRAINT etl_job_cancellation_key_hash_format_check
    CHECK (cancellation_key_hash ~ '^[0-9a-f]{64}$');
ALTER TABLE etl_job_records ADD CONSTRAINT etl_job_cancellation_code_check
    CHECK (cancellation_code IN ('etl_job_cancelled_by_owner'));
ALTER TABLE etl_job_records ADD CONSTRAINT etl_job_cancellation_lifecycle_check CHECK (
    (job_status = 'CANCELLED'
        AND cancellation_key_hash IS NOT NULL AND cancellation_code IS NOT NULL AND job_cancelled_at IS NOT NULL)
    OR
    (job_status <> 'CANCELLED'
        AND cancellation_key_hash IS NULL AND cancellation_code IS NULL AND job_cancelled_at IS NULL));
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $guard$
BEGIN
    IF EXISTS (SELECT 1 FROM etl_job_records WHERE job_status = 'CANCELLED') THEN
        RAISE EXCEPTION 'cannot roll back the cancellation migration while CANCELLED jobs exist; prune or archive them first'
            USING ERRCODE = 'object_in_use';
    END IF;
END
$guard$;
ALTER TABLE etl_job_records DROP CONSTRAINT etl_job_cancellation_lifecycle_check;
ALTER TABLE etl_job_records DROP CONSTRAINT etl_job_cancellation_code_check;
ALTER TABLE etl_job_records DROP CONSTRAINT etl_job_cancellation_key_hash_format_check;
ALTER TABLE etl_job_records DROP CONSTRAINT etl_job_status_check;
ALTER TABLE etl_job_records ADD CONSTRAINT etl_job_status_check
    CHECK (job_status IN ('PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED'));
ALTER TABLE etl_job_records
    DROP COLUMN job_cancelled_at,
    DROP COLUMN cancellation_code,
    DROP COLUMN cancellation_key_hash;
-- +goose StatementEnd
