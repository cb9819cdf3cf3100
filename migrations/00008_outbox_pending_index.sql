-- Outbox reads that stay O(batch) whatever the backlog (issue 12, defect 5).
--
-- Every etl_outbox_events row is pending: the relay deletes a row once it is
-- published (or, for an advisory row, dropped), so the table IS the backlog.
-- Until now only the primary key indexed it. The relay selects its two
-- classes of rows separately, each oldest first by outbox_event_id:
-- advisory rows (job_available, lease_revoked) and lifecycle rows
-- (job_lifecycle). While NATS is down lifecycle rows pile up (they are never
-- dropped) and the advisory batch walked the primary key past every one of
-- them to reach the wake-ups behind them: measured with a 100,000-row
-- backlog, 100,500 rows and 2,017 buffers per batch, on every wake-up; with
-- fresh rows (no statistics yet) the planner chose a sequential scan and a
-- sort of the whole table for both classes.
--
-- One partial index per class, keyed the way the relay reads it, so each
-- batch reads only its own class: at most its batch of entries, plus dead
-- entries of rows deleted since the last vacuum. The index predicates are the
-- relay's WHERE clauses (internal/outbox/store.go) written as constants, so
-- they also match a prepared statement's generic plan. The backlog gauge
-- counts through the same indexes with a limit and reads the oldest row of
-- each class from its head.
--
-- Write cost: each inserted outbox row (one per finish group, one per submit
-- statement, one per revocation) adds one entry to exactly one of these
-- small indexes. Building them takes a SHARE lock on the outbox, which holds
-- back outbox inserts for the build: milliseconds on a normal (drained)
-- outbox, about a second with a million-row backlog.

-- +goose Up
-- +goose StatementBegin
CREATE INDEX etl_outbox_advisory_pending_index
    ON etl_outbox_events (outbox_event_id)
    WHERE event_kind IN ('job_available', 'lease_revoked');
CREATE INDEX etl_outbox_lifecycle_pending_index
    ON etl_outbox_events (outbox_event_id)
    WHERE event_kind = 'job_lifecycle';
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DROP INDEX IF EXISTS etl_outbox_lifecycle_pending_index;
DROP INDEX IF EXISTS etl_outbox_advisory_pending_index;
-- +goose StatementEnd
