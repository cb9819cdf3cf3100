-- Fewer index entries per job state change. Every claim, finish and
-- renewal changes indexed columns, so PostgreSQL writes a new entry into
-- every index of etl_job_records (no HOT update): each index dropped here is
-- work saved on every transition of every job.
--
-- etl_job_owner_status_pagination_index served only the optional status
-- filter of the owner list; the list now walks the owner pagination index
-- and filters by status. etl_outbox_occurred_at_index served no query: the
-- relay reads by outbox_event_id and measures the backlog with one scan.

-- +goose Up
DROP INDEX IF EXISTS etl_job_owner_status_pagination_index;
DROP INDEX IF EXISTS etl_outbox_occurred_at_index;

-- +goose Down
CREATE INDEX IF NOT EXISTS etl_outbox_occurred_at_index ON etl_outbox_events (occurred_at);
CREATE INDEX IF NOT EXISTS etl_job_owner_status_pagination_index
    ON etl_job_records (principal_scope_hash, job_status, created_at DESC, job_record_id DESC);
