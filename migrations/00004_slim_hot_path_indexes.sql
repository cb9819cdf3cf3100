-- Less work per job state change.
--
-- Every claim, finish and renewal changes indexed columns, so PostgreSQL
-- writes a new entry into every index of etl_job_records (no HOT update):
-- each index dropped here is work saved on every transition of every job.
-- etl_job_owner_status_pagination_index served only the optional status
-- filter of the owner list; the list now walks the owner pagination index
-- and filters by status. etl_outbox_occurred_at_index served no query: the
-- relay reads by outbox_event_id and measures the backlog with one scan.
--
-- The outbox NOTIFY trigger fired for every statement with an outbox CTE,
-- even when it inserted no row (every claim statement has one for the
-- exhausted jobs it may fail). NOTIFY serialises committing transactions,
-- so it now fires only when the statement inserted at least one row.

-- +goose Up
-- +goose StatementBegin
DROP INDEX IF EXISTS etl_job_owner_status_pagination_index;
DROP INDEX IF EXISTS etl_outbox_occurred_at_index;

DROP TRIGGER IF EXISTS etl_outbox_notify_relay_trigger ON etl_outbox_events;
CREATE OR REPLACE FUNCTION etl_outbox_notify_relay_when_inserted() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF EXISTS (SELECT 1 FROM inserted_outbox_rows) THEN
        PERFORM pg_notify('etl_outbox_events', '');
    END IF;
    RETURN NULL;
END;
$fn$;
CREATE TRIGGER etl_outbox_notify_relay_trigger
    AFTER INSERT ON etl_outbox_events
    REFERENCING NEW TABLE AS inserted_outbox_rows
    FOR EACH STATEMENT EXECUTE FUNCTION etl_outbox_notify_relay_when_inserted();
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DROP TRIGGER IF EXISTS etl_outbox_notify_relay_trigger ON etl_outbox_events;
DROP FUNCTION IF EXISTS etl_outbox_notify_relay_when_inserted();
CREATE TRIGGER etl_outbox_notify_relay_trigger
    AFTER INSERT ON etl_outbox_events
    FOR EACH STATEMENT EXECUTE FUNCTION etl_outbox_notify_relay();
CREATE INDEX IF NOT EXISTS etl_outbox_occurred_at_index ON etl_outbox_events (occurred_at);
CREATE INDEX IF NOT EXISTS etl_job_owner_status_pagination_index
    ON etl_job_records (principal_scope_hash, job_status, created_at DESC, job_record_id DESC);
-- +goose StatementEnd
