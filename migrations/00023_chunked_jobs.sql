-- Large (chunked) ETL jobs (issue 32, docs/architecture.md "Large jobs").
--
-- A large job's payload arrives as a resumable upload and is stored in
-- PostgreSQL in chunks; the worker loads it chunk by chunk, each chunk's
-- target rows and the job's checkpoint committed in one transaction under
-- the exact lease (design invariant 11); the rows become visible to readers
-- with the job's success, in one commit.
--
--   * etl_uploads: one row per upload of one owner (principal_scope_hash),
--     OPEN while parts arrive, SUBMITTED once a job was created from it
--     (job_record_id). expires_at bounds an abandoned upload; the
--     maintainer prunes expired OPEN uploads and their parts and chunks.
--   * etl_upload_parts: the committed parts of an upload (1-based
--     part_number), each with its byte count (decompressed), SHA-256 and the
--     attempt (part_attempt_id) whose chunks hold its bytes. A part sent
--     again replaces its row; chunks of other attempts are garbage.
--   * etl_upload_chunks: the bytes, in chunks of at most a few MiB, each
--     written in its own short transaction (never one transaction per
--     upload or part: a long transaction holds back cleanup everywhere).
--   * etl_chunked_job_queue: the non-terminal jobs of kind etl_chunked. They
--     are never in etl_job_claim_queue, so a binary of level 1, which knows
--     no such kind, never claims one; binaries of level 2 claim them here
--     with the job row as the only authority (the queue row is a hint).
--   * etl_chunked_loads: one row per chunked job: its upload, format, the
--     checkpoint (chunks done, records loaded, bad records, where the next
--     record starts), and its visibility: LOADING until the fenced success
--     sets VISIBLE in the success transaction; DISCARDED once a failed or
--     cancelled job's rows are being removed.
--   * etl_chunked_load_bad_records: the record numbers (line of JSON Lines,
--     element of a JSON array, 1-based) skipped under maxBadRecords, with
--     the error code: never the record.
--   * processed_data_visible: what readers of loaded data read. It hides
--     the rows of every chunked job whose load is not VISIBLE (a hashed
--     NOT IN over the few loads in flight, one probe per row), so a reader
--     never sees a partial load; rows of other jobs are unchanged.
--
-- Online-safe: new tables and a view only; no existing relation is locked
-- or changed (the job kind etl_chunked is admitted by 00024). Binaries of
-- level 1 keep running on this schema (its compatibility row admits them):
-- they never see a chunked job.

-- +goose Up
-- +goose StatementBegin
SET LOCAL lock_timeout = '1s';
-- +goose StatementEnd
-- +goose StatementBegin
SET LOCAL statement_timeout = '5s';
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TABLE IF NOT EXISTS etl_uploads (
    upload_id uuid PRIMARY KEY,
    principal_scope_hash etl_sha256_digest NOT NULL,
    upload_format text NOT NULL
        CONSTRAINT etl_upload_format_check CHECK (upload_format IN ('jsonl', 'json_array')),
    upload_state text NOT NULL DEFAULT 'OPEN'
        CONSTRAINT etl_upload_state_check CHECK (upload_state IN ('OPEN', 'SUBMITTED')),
    staged_bytes bigint NOT NULL DEFAULT 0
        CONSTRAINT etl_upload_staged_bytes_check CHECK (staged_bytes >= 0),
    job_record_id uuid,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at timestamptz NOT NULL,
    CONSTRAINT etl_upload_job_lifecycle_check CHECK ((upload_state = 'SUBMITTED') = (job_record_id IS NOT NULL))
);
-- +goose StatementEnd
-- +goose StatementBegin
CREATE INDEX IF NOT EXISTS etl_upload_owner_index ON etl_uploads (principal_scope_hash, created_at);
-- +goose StatementEnd
-- +goose StatementBegin
CREATE INDEX IF NOT EXISTS etl_upload_open_expiry_index ON etl_uploads (expires_at) WHERE upload_state = 'OPEN';
-- +goose StatementEnd
-- +goose StatementBegin
CREATE UNIQUE INDEX IF NOT EXISTS etl_upload_job_index ON etl_uploads (job_record_id) WHERE job_record_id IS NOT NULL;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TABLE IF NOT EXISTS etl_upload_parts (
    upload_id uuid NOT NULL,
    part_number bigint NOT NULL
        CONSTRAINT etl_upload_part_number_check CHECK (part_number BETWEEN 1 AND 100000),
    part_attempt_id uuid NOT NULL,
    part_bytes bigint NOT NULL
        CONSTRAINT etl_upload_part_bytes_check CHECK (part_bytes >= 0),
    part_sha256 bytea NOT NULL
        CONSTRAINT etl_upload_part_sha256_check CHECK (octet_length(part_sha256) = 32),
    chunk_count bigint NOT NULL
        CONSTRAINT etl_upload_part_chunk_count_check CHECK (chunk_count >= 0),
    committed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (upload_id, part_number)
);
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TABLE IF NOT EXISTS etl_upload_chunks (
    upload_id uuid NOT NULL,
    part_attempt_id uuid NOT NULL,
    chunk_index bigint NOT NULL
        CONSTRAINT etl_upload_chunk_index_check CHECK (chunk_index >= 0),
    chunk_data bytea NOT NULL,
    PRIMARY KEY (upload_id, part_attempt_id, chunk_index)
);
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TABLE IF NOT EXISTS etl_chunked_job_queue (
    job_record_id uuid PRIMARY KEY,
    enqueued_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TABLE IF NOT EXISTS etl_chunked_loads (
    job_record_id uuid PRIMARY KEY,
    upload_id uuid NOT NULL,
    load_format text NOT NULL
        CONSTRAINT etl_chunked_load_format_check CHECK (load_format IN ('jsonl', 'json_array')),
    load_state text NOT NULL DEFAULT 'LOADING'
        CONSTRAINT etl_chunked_load_state_check CHECK (load_state IN ('LOADING', 'VISIBLE', 'DISCARDED')),
    max_bad_records bigint NOT NULL DEFAULT 0
        CONSTRAINT etl_chunked_load_max_bad_records_check CHECK (max_bad_records >= 0),
    payload_bytes bigint NOT NULL
        CONSTRAINT etl_chunked_load_payload_bytes_check CHECK (payload_bytes >= 0),
    records_total bigint
        CONSTRAINT etl_chunked_load_records_total_check CHECK (records_total >= 0),
    chunks_done bigint NOT NULL DEFAULT 0
        CONSTRAINT etl_chunked_load_chunks_done_check CHECK (chunks_done >= 0),
    records_loaded bigint NOT NULL DEFAULT 0
        CONSTRAINT etl_chunked_load_records_loaded_check CHECK (records_loaded >= 0),
    bad_records bigint NOT NULL DEFAULT 0
        CONSTRAINT etl_chunked_load_bad_records_check CHECK (bad_records >= 0),
    next_part_number bigint NOT NULL DEFAULT 1
        CONSTRAINT etl_chunked_load_next_part_check CHECK (next_part_number >= 1),
    next_part_offset bigint NOT NULL DEFAULT 0
        CONSTRAINT etl_chunked_load_next_offset_check CHECK (next_part_offset >= 0),
    next_record_number bigint NOT NULL DEFAULT 1
        CONSTRAINT etl_chunked_load_next_record_check CHECK (next_record_number >= 1),
    failed_record_number bigint,
    checkpoint_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- +goose StatementEnd
-- +goose StatementBegin
CREATE INDEX IF NOT EXISTS etl_chunked_load_hidden_index ON etl_chunked_loads (job_record_id) WHERE load_state <> 'VISIBLE';
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TABLE IF NOT EXISTS etl_chunked_load_bad_records (
    job_record_id uuid NOT NULL,
    record_number bigint NOT NULL
        CONSTRAINT etl_chunked_bad_record_number_check CHECK (record_number >= 1),
    error_code text NOT NULL
        CONSTRAINT etl_chunked_bad_record_code_check CHECK (error_code ~ '^[a-z][a-z0-9_]{2,127}$'),
    PRIMARY KEY (job_record_id, record_number)
);
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE VIEW processed_data_visible AS
SELECT d.processed_data_id, d.job_record_id, d.data, d.normalized_record, d.created_at
FROM processed_data d
WHERE d.job_record_id IS NULL
   OR d.job_record_id NOT IN (SELECT l.job_record_id FROM etl_chunked_loads l WHERE l.load_state <> 'VISIBLE');
-- +goose StatementEnd
-- +goose StatementBegin
INSERT INTO etl_schema_compatibility (schema_version, oldest_compatible_binary) VALUES (23, 1)
ON CONFLICT (schema_version) DO NOTHING;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
SET LOCAL lock_timeout = '1s';
-- +goose StatementEnd
-- +goose StatementBegin
SET LOCAL statement_timeout = '5s';
-- +goose StatementEnd
-- +goose StatementBegin
DO $guard$
BEGIN
    -- Rows a load still hides (a failed or cancelled large job's) would be
    -- plain processed_data rows once the view and loads are gone: remove
    -- them first (etlctl prune).
    IF EXISTS (SELECT 1 FROM etl_chunked_loads WHERE load_state <> 'VISIBLE') THEN
        RAISE EXCEPTION 'loads not made visible still have rows to remove; run etlctl prune before migrating below 23';
    END IF;
END
$guard$;
-- +goose StatementEnd
-- +goose StatementBegin
DELETE FROM etl_schema_compatibility WHERE schema_version = 23;
-- +goose StatementEnd
-- +goose StatementBegin
DROP VIEW IF EXISTS processed_data_visible;
-- +goose StatementEnd
-- +goose StatementBegin
DROP TABLE IF EXISTS etl_chunked_load_bad_records, etl_chunked_loads, etl_chunked_job_queue,
    etl_upload_chunks, etl_upload_parts, etl_uploads;
-- +goose StatementEnd
