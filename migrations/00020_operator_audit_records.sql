-- A durable operator audit (issue 29). Until now nothing durable recorded
-- which operator acted: the actor hash of migration 00010 lives only on
-- outbox rows, which the relay deletes within milliseconds of the commit.
--
-- etl_operator_audit_records holds one row per operator action (a single
-- cancellation, a bulk cancellation, a replay), inserted by the action's own
-- statement (internal/pg/audit.go), so the row commits exactly when the
-- action commits and a statement that fails or rolls back leaves none:
--   * audit_record_id: an identity, so ids grow with insertion; newest first
--     is a backward walk of the primary key (the keyset of GET /api/ops/audit
--     and the console's Audit page), whatever the table size;
--   * operator_principal_scope_hash: the operator's keyed principal scope
--     hash (the value of the outbox's actor_principal_scope_hash), 32 bytes
--     (domain etl_sha256_digest of 00014), never the principal itself;
--   * operator_action: cancel, bulk_cancel or replay;
--   * job_record_id: the job a cancel or replay acted on (no foreign key:
--     the job may be pruned long before its audit row, and a refused action
--     may name a job that never existed); replay_job_record_id: the job a
--     replay created or found again;
--   * bulk_filter and job_count: a bulk cancellation's filter, as a JSON
--     object of the fixed non-sensitive members below (the CHECK refuses any
--     other member: never a payload, key or principal), and how many jobs it
--     cancelled;
--   * outcome_code: 'ok', or the code (internal/codes) of why the action
--     did nothing;
--   * created_at: the database clock (clock_timestamp()) at the insert; the
--     intake role cannot set it (no INSERT grant on the column).
--
-- Append-only: the application roles may only INSERT and SELECT
-- (deploy/postgres/least-privilege.sql); a statement trigger refuses every
-- UPDATE, whoever runs it. Only `etlctl prune` deletes, rows older than its
-- audit window (internal/pg/prune.go), oldest first along
-- etl_operator_audit_created_at_index.

-- +goose Up
-- +goose StatementBegin
CREATE TABLE etl_operator_audit_records (
    audit_record_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    operator_principal_scope_hash etl_sha256_digest NOT NULL,
    operator_action text NOT NULL
        CONSTRAINT etl_operator_audit_action_check CHECK (operator_action IN ('cancel', 'bulk_cancel', 'replay')),
    job_record_id uuid,
    replay_job_record_id uuid,
    bulk_filter jsonb,
    job_count integer CONSTRAINT etl_operator_audit_job_count_check CHECK (job_count >= 0),
    outcome_code text NOT NULL
        CONSTRAINT etl_operator_audit_outcome_code_check
        CHECK (outcome_code = 'ok' OR outcome_code ~ '^etl_[a-z0-9_]{1,120}$'),
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- A single action names its job; a bulk action names its filter and count.
    CONSTRAINT etl_operator_audit_shape_check CHECK (
        CASE operator_action
            WHEN 'bulk_cancel' THEN job_record_id IS NULL AND replay_job_record_id IS NULL
                                    AND bulk_filter IS NOT NULL AND job_count IS NOT NULL
            WHEN 'cancel' THEN job_record_id IS NOT NULL AND replay_job_record_id IS NULL
                               AND bulk_filter IS NULL AND job_count IS NULL
            ELSE job_record_id IS NOT NULL AND bulk_filter IS NULL AND job_count IS NULL
        END),
    -- The filter's members are the console's non-sensitive filter fields.
    CONSTRAINT etl_operator_audit_bulk_filter_check CHECK (
        jsonb_typeof(bulk_filter) = 'object'
        AND bulk_filter - ARRAY['state', 'kind', 'code', 'from', 'to', 'confirmed'] = '{}'::jsonb
        AND octet_length(bulk_filter::text) <= 1024)
);

-- Retention: prune walks the oldest rows first.
CREATE INDEX etl_operator_audit_created_at_index ON etl_operator_audit_records (created_at);

CREATE FUNCTION etl_operator_audit_refuse_update() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RAISE EXCEPTION 'etl_operator_audit_records is append-only'
        USING ERRCODE = 'insufficient_privilege';
END
$fn$;

CREATE TRIGGER etl_operator_audit_append_only_trigger
    BEFORE UPDATE ON etl_operator_audit_records
    FOR EACH STATEMENT EXECUTE FUNCTION etl_operator_audit_refuse_update();
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
-- The audit rows go with the table: down is for rolling back a deployment
-- that has just applied this migration; archive them first if they matter.
DROP TABLE IF EXISTS etl_operator_audit_records;
DROP FUNCTION IF EXISTS etl_operator_audit_refuse_update();
-- +goose StatementEnd
