-- Built-in maintenance (issue 31, docs/operations/maintenance.md).
--
-- Retention (what `etlctl prune` does) runs inside the worker fleet, by one
-- elected maintainer at a time. The election is a leader row with an expiry
-- on the database clock, not an advisory lock: a session lock does not
-- survive a connection pooler in transaction mode (PgBouncer), a row does.
--
-- etl_maintenance_leader holds one row per maintenance role (today only
-- 'retention'):
--   * leader_name: which maintenance this row elects;
--   * holder_id: the process holding it (its worker owner id), so the
--     holder can renew its own term;
--   * leader_token: a fresh uuid per term (each take-over writes a new one);
--     every prune batch of the maintainer first re-checks, in the batch's
--     own transaction, that the row still carries its token and has not
--     expired (FOR SHARE), so a holder that paused past its expiry and lost
--     the row deletes nothing (internal/maintenance);
--   * elected_at, expires_at: the database clock (clock_timestamp()) when
--     the term began and when it lapses unless renewed.
-- Taking and renewing are one conditional upsert each (INSERT ... ON
-- CONFLICT DO UPDATE ... WHERE the row expired or is the caller's own).
--
-- Online-safe and additive: a new table only; no existing relation is
-- locked or changed, so binaries of level 1 (which never read this table)
-- keep running on this schema: its compatibility row admits level 1. Up and
-- down run under a short lock_timeout and statement_timeout.

-- +goose Up
-- +goose StatementBegin
SET LOCAL lock_timeout = '1s';
-- +goose StatementEnd
-- +goose StatementBegin
SET LOCAL statement_timeout = '5s';
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TABLE IF NOT EXISTS etl_maintenance_leader (
    leader_name text PRIMARY KEY
        CONSTRAINT etl_maintenance_leader_name_check CHECK (leader_name ~ '^[a-z][a-z0-9_]{0,62}$'),
    holder_id text NOT NULL
        CONSTRAINT etl_maintenance_leader_holder_check CHECK (octet_length(holder_id) BETWEEN 1 AND 200),
    leader_token uuid NOT NULL,
    elected_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at timestamptz NOT NULL
);
-- +goose StatementEnd
-- +goose StatementBegin
INSERT INTO etl_schema_compatibility (schema_version, oldest_compatible_binary) VALUES (22, 1)
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
DELETE FROM etl_schema_compatibility WHERE schema_version = 22;
-- +goose StatementEnd
-- +goose StatementBegin
-- A binary of this schema treats a missing leader table as "no maintainer
-- may be elected" and prunes nothing until the table is back.
DROP TABLE IF EXISTS etl_maintenance_leader;
-- +goose StatementEnd
