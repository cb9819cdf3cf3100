-- The schema-compatibility contract (issue 30, docs/operations/upgrades.md).
--
-- etl_schema_compatibility holds one row per schema version that declares
-- which binaries may run against it: oldest_compatible_binary is the oldest
-- binary compatibility level (internal/pg.BinaryCompatLevel, an integer each
-- binary declares, so comparisons are exact) that still works with the
-- schema at schema_version. Each later migration inserts its own row (and
-- its down deletes it); a binary reading a schema newer than it knows runs
-- only when the newest row admits its level (internal/pg.CheckCompatibility).
--
-- Online-safe: a new table only; no existing relation is locked. Up and
-- down run under a short lock_timeout (the down's DROP takes this table's
-- ACCESS EXCLUSIVE lock, which every binary's compatibility check reads).

-- +goose Up
-- +goose StatementBegin
SET LOCAL lock_timeout = '1s';
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TABLE IF NOT EXISTS etl_schema_compatibility (
    schema_version bigint PRIMARY KEY CHECK (schema_version > 0),
    oldest_compatible_binary bigint NOT NULL CHECK (oldest_compatible_binary > 0)
);
-- +goose StatementEnd
-- +goose StatementBegin
INSERT INTO etl_schema_compatibility (schema_version, oldest_compatible_binary) VALUES (21, 1);
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
SET LOCAL lock_timeout = '1s';
-- +goose StatementEnd
-- +goose StatementBegin
SET LOCAL statement_timeout = '5s';
-- +goose StatementEnd
-- +goose StatementBegin
DROP TABLE IF EXISTS etl_schema_compatibility;
-- +goose StatementEnd
