-- Trigger functions resolve names in schema public only (issue 29, defect 6).
--
-- A trigger function runs with the search_path of the session that fired it,
-- and every session's search_path begins, implicitly, with its own temporary
-- schema. PUBLIC may create temporary tables by default, so a role with the
-- intake's grants could create a temporary etl_job_records holding another
-- owner's job id under its own principal hash and then insert into
-- public.etl_job_records a replay of that job: the owner guard (00007,
-- 00017) read the temporary table and let it through.
--
-- Every trigger function of the migrations now runs with
-- search_path = pg_catalog, public, pg_temp, as the SECURITY DEFINER
-- functions (00009 to 00015) already do: pg_temp named last is searched last
-- (and never for functions or operators), so an unqualified table name is
-- the mightyETL table in public. A trigger's transition table
-- (deleted_job_rows, inserted_outbox_rows) is found before any schema, as
-- before. Schema public is where the migrations create every object and what
-- the SECURITY DEFINER functions and deploy/postgres/least-privilege.sql
-- name. The functions that read no table (the notify and immutability
-- guards) are pinned too, so the rule has no exception; the immutability
-- guards run only when their trigger's WHEN finds a violation.
-- deploy/postgres/least-privilege.sql also revokes TEMPORARY on the database
-- from PUBLIC.
--
-- Down resets the functions' search_path, which restores 00017's definitions.

-- +goose Up
-- +goose StatementBegin
ALTER FUNCTION etl_outbox_notify_relay() SET search_path = pg_catalog, public, pg_temp;
ALTER FUNCTION etl_outbox_notify_relay_when_inserted() SET search_path = pg_catalog, public, pg_temp;
ALTER FUNCTION etl_job_replay_lineage_guard() SET search_path = pg_catalog, public, pg_temp;
ALTER FUNCTION etl_job_claim_queue_cascade() SET search_path = pg_catalog, public, pg_temp;
ALTER FUNCTION etl_job_replay_owner_guard() SET search_path = pg_catalog, public, pg_temp;
ALTER FUNCTION etl_job_owner_immutable_guard() SET search_path = pg_catalog, public, pg_temp;
ALTER FUNCTION etl_job_replay_reference_guard() SET search_path = pg_catalog, public, pg_temp;
ALTER FUNCTION etl_job_id_immutable_guard() SET search_path = pg_catalog, public, pg_temp;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
ALTER FUNCTION etl_outbox_notify_relay() RESET search_path;
ALTER FUNCTION etl_outbox_notify_relay_when_inserted() RESET search_path;
ALTER FUNCTION etl_job_replay_lineage_guard() RESET search_path;
ALTER FUNCTION etl_job_claim_queue_cascade() RESET search_path;
ALTER FUNCTION etl_job_replay_owner_guard() RESET search_path;
ALTER FUNCTION etl_job_owner_immutable_guard() RESET search_path;
ALTER FUNCTION etl_job_replay_reference_guard() RESET search_path;
ALTER FUNCTION etl_job_id_immutable_guard() RESET search_path;
-- +goose StatementEnd
