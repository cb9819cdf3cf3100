-- Durable job core: the job table, the response ledger, the default target and
-- the transactional outbox. Every lifecycle rule that the database can decide
-- is a CHECK constraint here, so no code path can write an illegal row shape.

-- +goose Up
-- +goose StatementBegin
CREATE SEQUENCE etl_lease_fencing_token_sequence AS bigint START WITH 1 INCREMENT BY 1 NO CYCLE;

CREATE TABLE etl_job_records (
    job_record_id        uuid        PRIMARY KEY,
    job_kind             text        NOT NULL,
    principal_scope_hash text        NOT NULL,
    submission_key_hash  text        NOT NULL,
    request_digest       text        NOT NULL,
    request_payload      text,
    job_status           text        NOT NULL DEFAULT 'PENDING',
    attempt_count        integer     NOT NULL DEFAULT 0,
    max_attempts         integer     NOT NULL,
    available_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    lease_claim_id       uuid,
    lease_owner_id       text,
    lease_expires_at     timestamptz,
    lease_fencing_token  bigint,
    failure_code         text,
    created_at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at           timestamptz NOT NULL DEFAULT clock_timestamp(),

    CONSTRAINT etl_job_kind_check CHECK (job_kind IN ('etl_records', 'diagnostic')),
    CONSTRAINT etl_job_status_check CHECK (job_status IN ('PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED')),
    CONSTRAINT etl_job_principal_scope_hash_format_check CHECK (principal_scope_hash ~ '^[0-9a-f]{64}$'),
    CONSTRAINT etl_job_submission_key_hash_format_check CHECK (submission_key_hash ~ '^[0-9a-f]{64}$'),
    CONSTRAINT etl_job_request_digest_format_check CHECK (request_digest ~ '^[0-9a-f]{64}$'),
    CONSTRAINT etl_job_max_attempts_range_check CHECK (max_attempts BETWEEN 1 AND 100),
    CONSTRAINT etl_job_attempt_count_range_check CHECK (attempt_count BETWEEN 0 AND max_attempts),
    CONSTRAINT etl_job_lease_owner_format_check CHECK (lease_owner_id ~ '^[A-Za-z0-9._:-]{8,128}$'),
    CONSTRAINT etl_job_failure_code_format_check CHECK (failure_code ~ '^[a-z][a-z0-9_]{2,127}$'),
    -- payload iff PENDING/RUNNING: a terminal row keeps no payload.
    CONSTRAINT etl_job_payload_lifecycle_check CHECK (
        (request_payload IS NOT NULL) = (job_status IN ('PENDING', 'RUNNING'))),
    -- every lease column iff RUNNING: a lease never outlives the RUNNING state.
    CONSTRAINT etl_job_lease_lifecycle_check CHECK (
        (job_status = 'RUNNING'
            AND lease_claim_id IS NOT NULL AND lease_owner_id IS NOT NULL
            AND lease_expires_at IS NOT NULL AND lease_fencing_token IS NOT NULL
            AND attempt_count >= 1)
        OR
        (job_status <> 'RUNNING'
            AND lease_claim_id IS NULL AND lease_owner_id IS NULL
            AND lease_expires_at IS NULL AND lease_fencing_token IS NULL)),
    -- failure_code iff FAILED.
    CONSTRAINT etl_job_failure_lifecycle_check CHECK ((failure_code IS NOT NULL) = (job_status = 'FAILED')),
    CONSTRAINT etl_job_submission_key_unique UNIQUE (principal_scope_hash, submission_key_hash)
);

-- Claim eligibility, split by state so each partial index holds only the hot
-- rows: the claim walks PENDING rows in available_at order and RUNNING rows in
-- lease expiry order, reading O(batch) index entries whatever the table size.
CREATE INDEX etl_job_claim_eligibility_index
    ON etl_job_records (available_at, job_record_id) WHERE job_status = 'PENDING';
CREATE INDEX etl_job_lease_expiry_index
    ON etl_job_records (lease_expires_at) WHERE job_status = 'RUNNING';
-- Owner pagination, newest first.
CREATE INDEX etl_job_owner_pagination_index
    ON etl_job_records (principal_scope_hash, created_at DESC, job_record_id DESC);
CREATE INDEX etl_job_owner_status_pagination_index
    ON etl_job_records (principal_scope_hash, job_status, created_at DESC, job_record_id DESC);

-- Response ledger: one row per synchronous idempotent request and one per
-- successfully loaded durable job, holding the response text.
CREATE TABLE etl_idempotency_records (
    principal_scope_hash  text        NOT NULL,
    idempotency_key_hash  text        NOT NULL,
    request_digest        text        NOT NULL,
    response_text         text        NOT NULL,
    job_record_id         uuid,
    created_at            timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT etl_idempotency_records_pkey PRIMARY KEY (principal_scope_hash, idempotency_key_hash),
    CONSTRAINT etl_idempotency_job_record_unique UNIQUE (job_record_id),
    CONSTRAINT etl_idempotency_principal_scope_hash_format_check CHECK (principal_scope_hash ~ '^[0-9a-f]{64}$'),
    CONSTRAINT etl_idempotency_key_hash_format_check CHECK (idempotency_key_hash ~ '^[0-9a-f]{64}$'),
    CONSTRAINT etl_idempotency_request_digest_format_check CHECK (request_digest ~ '^[0-9a-f]{64}$')
);
CREATE INDEX etl_idempotency_created_at_index ON etl_idempotency_records (created_at);

-- Default ETL target. job_record_id is NULL for rows of the synchronous path.
CREATE TABLE processed_data (
    processed_data_id bigserial   PRIMARY KEY,
    job_record_id     uuid,
    data              text        NOT NULL,
    normalized_record jsonb       NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX processed_data_job_record_index ON processed_data (job_record_id) WHERE job_record_id IS NOT NULL;

-- Transactional outbox: payload-free rows written in the same transaction as
-- the state change they announce; the relay publishes them to NATS.
CREATE TABLE etl_outbox_events (
    outbox_event_id  bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_kind       text        NOT NULL,
    job_record_id    uuid,
    job_status       text,
    attempt_count    integer,
    event_code       text,
    occurred_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT etl_outbox_event_kind_check CHECK (event_kind IN ('job_available', 'lease_revoked', 'job_lifecycle')),
    CONSTRAINT etl_outbox_event_code_format_check CHECK (event_code ~ '^[a-z][a-z0-9_]{2,127}$'),
    CONSTRAINT etl_outbox_lifecycle_shape_check CHECK (
        event_kind <> 'job_lifecycle' OR (job_record_id IS NOT NULL AND job_status IS NOT NULL))
);
CREATE INDEX etl_outbox_occurred_at_index ON etl_outbox_events (occurred_at);

-- Wake the relay at commit: one NOTIFY per inserting statement; PostgreSQL
-- folds identical notifications of one transaction into one.
CREATE FUNCTION etl_outbox_notify_relay() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM pg_notify('etl_outbox_events', '');
    RETURN NULL;
END;
$fn$;
CREATE TRIGGER etl_outbox_notify_relay_trigger
    AFTER INSERT ON etl_outbox_events
    FOR EACH STATEMENT EXECUTE FUNCTION etl_outbox_notify_relay();
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DROP TRIGGER IF EXISTS etl_outbox_notify_relay_trigger ON etl_outbox_events;
DROP FUNCTION IF EXISTS etl_outbox_notify_relay();
DROP TABLE IF EXISTS etl_outbox_events;
DROP TABLE IF EXISTS processed_data;
DROP TABLE IF EXISTS etl_idempotency_records;
DROP TABLE IF EXISTS etl_job_records;
DROP SEQUENCE IF EXISTS etl_lease_fencing_token_sequence;
-- +goose StatementEnd
