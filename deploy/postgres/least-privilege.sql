-- mightyETL least-privilege database roles.
--
-- Run as a superuser (or the current owner of the mightyETL objects) AFTER the
-- migrations are applied, in the mightyETL database:
--
--   psql -v ON_ERROR_STOP=1 -d mightyetl -f deploy/postgres/least-privilege.sql
--
-- The script is idempotent and convergent: it creates missing roles, revokes
-- every privilege the three application roles hold on the mightyETL objects,
-- then grants exactly the set below. Re-run it after every migration that adds
-- or changes a table; a migration that adds a table without amending this file
-- leaves the application roles without access to it (fail closed).
--
-- The four roles are NOLOGIN group roles. Give each process its own login role
-- and make it a member of one group role, for example:
--
--   CREATE ROLE mightyetl_worker_login LOGIN PASSWORD '...' IN ROLE mightyetl_worker_role;
--   CREATE ROLE mightyetl_intake_login LOGIN PASSWORD '...' IN ROLE mightyetl_intake_role;
--   CREATE ROLE mightyetl_migrator_login LOGIN PASSWORD '...' IN ROLE mightyetl_migrator_role;
--   -- new objects must be owned by the group role, not by the login:
--   ALTER ROLE mightyetl_migrator_login SET role = 'mightyetl_migrator_role';
--
-- cmd/intake connects with one DATABASE_URL. While the outbox relay runs in
-- the intake process, that login needs both mightyetl_intake_role and
-- mightyetl_relay_role. Likewise cmd/worker runs the fleet's built-in
-- retention (MIGHTYETL_MAINTENANCE_ENABLED, default true): its login needs
-- mightyetl_worker_role and mightyetl_maintenance_role, or set
-- MIGHTYETL_MAINTENANCE_ENABLED=false and run `etlctl prune` as the owner.

\set ON_ERROR_STOP on

BEGIN;

-- Refuse to run against a database without the schema: grants on missing
-- tables would fail half-way and hide the real problem.
DO $check$
BEGIN
    IF to_regclass('public.etl_job_records') IS NULL THEN
        RAISE EXCEPTION 'mightyETL tables not found; run `etlctl migrate up` first';
    END IF;
END
$check$;

-- Roles, created only when missing.
DO $roles$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['mightyetl_migrator_role', 'mightyetl_worker_role',
                             'mightyetl_intake_role', 'mightyetl_relay_role',
                             'mightyetl_maintenance_role']
    LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
END
$roles$;

-- The application roles inherit nothing and own nothing.
ALTER ROLE mightyetl_worker_role NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS;
ALTER ROLE mightyetl_intake_role NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS;
ALTER ROLE mightyetl_relay_role  NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS;
ALTER ROLE mightyetl_maintenance_role NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS;
-- The migrator creates tables in this database, never databases or roles.
ALTER ROLE mightyetl_migrator_role NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS;

-- Nobody but the migrator creates objects in schema public (PostgreSQL 14
-- and older grant CREATE there to PUBLIC): a role that could would be able
-- to plant a table, view or function that a later search_path lookup finds.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
-- Nor does anyone but the database owner create temporary tables (PUBLIC
-- may by default): a session's temporary schema comes first in its
-- search_path, so a temporary table could stand in for a mightyETL table in
-- any statement that names it unqualified. The migrations' functions pin
-- their search_path (00019) as well; this keeps the application's own
-- statements safe too.
DO $temporary$
BEGIN
    EXECUTE format('REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC, mightyetl_migrator_role, '
                   'mightyetl_worker_role, mightyetl_intake_role, mightyetl_relay_role, mightyetl_maintenance_role',
                   current_database());
END
$temporary$;

------------------------------------------------------------------------------
-- Migrator: owns every mightyETL object and may create new ones. Owning a
-- table owns its serial/identity sequences too.
------------------------------------------------------------------------------
GRANT USAGE, CREATE ON SCHEMA public TO mightyetl_migrator_role;
ALTER TABLE etl_job_records         OWNER TO mightyetl_migrator_role;
ALTER TABLE etl_idempotency_records OWNER TO mightyetl_migrator_role;
ALTER TABLE processed_data          OWNER TO mightyetl_migrator_role;
ALTER TABLE etl_outbox_events       OWNER TO mightyetl_migrator_role;
ALTER TABLE etl_job_claim_queue     OWNER TO mightyetl_migrator_role;
ALTER TABLE etl_operator_audit_records OWNER TO mightyetl_migrator_role;
ALTER TABLE etl_schema_compatibility OWNER TO mightyetl_migrator_role;
ALTER TABLE etl_maintenance_leader OWNER TO mightyetl_migrator_role;
ALTER VIEW  etl_outbox_job_events   OWNER TO mightyetl_migrator_role;
ALTER TABLE etl_uploads             OWNER TO mightyetl_migrator_role;
ALTER TABLE etl_upload_parts        OWNER TO mightyetl_migrator_role;
ALTER TABLE etl_upload_chunks       OWNER TO mightyetl_migrator_role;
ALTER TABLE etl_chunked_job_queue   OWNER TO mightyetl_migrator_role;
ALTER TABLE etl_chunked_loads       OWNER TO mightyetl_migrator_role;
ALTER TABLE etl_chunked_load_bad_records OWNER TO mightyetl_migrator_role;
ALTER TABLE etl_claim_owners        OWNER TO mightyetl_migrator_role;
ALTER VIEW  processed_data_visible  OWNER TO mightyetl_migrator_role;
ALTER SEQUENCE etl_lease_fencing_token_sequence OWNER TO mightyetl_migrator_role;
DO $functions$
DECLARE
    f regprocedure;
BEGIN
    -- Trigger functions of the migrations (etl_outbox_notify_relay and later ones).
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
             WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'etl\_%'
    LOOP
        EXECUTE format('ALTER FUNCTION %s OWNER TO mightyetl_migrator_role', f);
    END LOOP;
END
$functions$;
DO $domains$
DECLARE
    d regtype;
BEGIN
    -- The migrations' domains (etl_sha256_digest of 00014, the text domains
    -- of 00005): a down migration drops or replaces them, which only their
    -- owner may do.
    FOR d IN SELECT t.oid::regtype FROM pg_type t
             WHERE t.typnamespace = 'public'::regnamespace AND t.typtype = 'd' AND t.typname LIKE 'etl\_%'
    LOOP
        EXECUTE format('ALTER DOMAIN %s OWNER TO mightyetl_migrator_role', d);
    END LOOP;
END
$domains$;
DO $goose$
BEGIN
    -- goose's version table exists once `etlctl migrate up` has run.
    IF to_regclass('public.mightyetl_schema_migrations') IS NOT NULL THEN
        ALTER TABLE mightyetl_schema_migrations OWNER TO mightyetl_migrator_role;
    END IF;
END
$goose$;

------------------------------------------------------------------------------
-- Start from nothing: PUBLIC and the application roles lose every privilege
-- on the mightyETL objects. Revoking a table privilege also revokes the
-- matching column privileges.
------------------------------------------------------------------------------
REVOKE ALL ON TABLE etl_job_records, etl_idempotency_records, processed_data, etl_outbox_events,
                    etl_job_claim_queue, etl_operator_audit_records, etl_schema_compatibility,
                    etl_maintenance_leader, etl_uploads, etl_upload_parts, etl_upload_chunks,
                    etl_chunked_job_queue, etl_chunked_loads, etl_chunked_load_bad_records,
                    processed_data_visible, etl_claim_owners
    FROM PUBLIC, mightyetl_worker_role, mightyetl_intake_role, mightyetl_relay_role, mightyetl_maintenance_role;
REVOKE ALL ON SEQUENCE etl_lease_fencing_token_sequence, processed_data_processed_data_id_seq
    FROM PUBLIC, mightyetl_worker_role, mightyetl_intake_role, mightyetl_relay_role, mightyetl_maintenance_role;
DO $goose_revoke$
BEGIN
    IF to_regclass('public.mightyetl_schema_migrations') IS NOT NULL THEN
        REVOKE ALL ON TABLE mightyetl_schema_migrations
            FROM PUBLIC, mightyetl_worker_role, mightyetl_intake_role, mightyetl_relay_role, mightyetl_maintenance_role;
        -- Every binary reads the schema version at start-up and in /readyz.
        GRANT SELECT ON TABLE mightyetl_schema_migrations
            TO mightyetl_worker_role, mightyetl_intake_role, mightyetl_relay_role;
    END IF;
END
$goose_revoke$;
-- Every binary checks the schema-compatibility contract (00021) at start-up,
-- before claiming and in /readyz.
GRANT SELECT ON TABLE etl_schema_compatibility
    TO mightyetl_worker_role, mightyetl_intake_role, mightyetl_relay_role;

GRANT USAGE ON SCHEMA public TO mightyetl_worker_role, mightyetl_intake_role, mightyetl_relay_role,
    mightyetl_maintenance_role;

-- Functions are executable by PUBLIC by default; the SECURITY DEFINER
-- cancellation (migration 00009) is the intake's alone.
REVOKE ALL ON FUNCTION etl_cancel_job(uuid, text, text)
    FROM PUBLIC, mightyetl_worker_role, mightyetl_intake_role, mightyetl_relay_role, mightyetl_maintenance_role;
-- The operator console's cancellation and bounded reads (migration 00010)
-- are the intake's alone too.
REVOKE ALL ON FUNCTION etl_operator_cancel_job(uuid, text, text), etl_ops_job_private(uuid),
                       etl_ops_active_jobs(integer), etl_ops_counters(), etl_ops_outbox_backlog(integer)
    FROM PUBLIC, mightyetl_worker_role, mightyetl_intake_role, mightyetl_relay_role, mightyetl_maintenance_role;
-- So is the operator's replay (migration 00011).
REVOKE ALL ON FUNCTION etl_operator_replay_job(uuid, text, text, text, text, uuid)
    FROM PUBLIC, mightyetl_worker_role, mightyetl_intake_role, mightyetl_relay_role, mightyetl_maintenance_role;

------------------------------------------------------------------------------
-- Worker: claim, renew, succeed, retry, fail, release (internal/lease) and the
-- finish transaction (internal/worker/completer.go).
--   * SELECT: the lease predicates read the row; RETURNING returns columns;
--     a lost lease is classified by reading job_status.
--   * UPDATE only of the lifecycle and lease columns. The worker cannot touch
--     identity, ownership, hashes, digest, max_attempts or cancellation
--     columns, so it cannot move a job to another principal, forge a
--     cancellation or change the attempt budget.
--   * INSERT only into the target, the response ledger and the outbox.
--   * The fencing sequence (nextval in the claim) and processed_data's sequence.
------------------------------------------------------------------------------
GRANT SELECT ON TABLE etl_job_records TO mightyetl_worker_role;
GRANT UPDATE (job_status, attempt_count, available_at,
              lease_claim_id, lease_owner_id, lease_expires_at, lease_fencing_token,
              failure_code, request_payload, updated_at)
    ON TABLE etl_job_records TO mightyetl_worker_role;
-- Durable jobs write no response-ledger row (migration 00005, docs/architecture.md).
GRANT INSERT ON TABLE processed_data, etl_outbox_events
    TO mightyetl_worker_role;
-- The claim queue: the claim moves and removes rows; the finish removes them.
GRANT SELECT, DELETE, UPDATE (claimable_at) ON TABLE etl_job_claim_queue TO mightyetl_worker_role;
-- Fair claiming (migration 00025): the claim locks and moves the owners it
-- serves; a retry or release makes its job's owner due.
GRANT SELECT, UPDATE (due_at, idle_visits, updated_at) ON TABLE etl_claim_owners TO mightyetl_worker_role;
GRANT USAGE ON SEQUENCE etl_lease_fencing_token_sequence, processed_data_processed_data_id_seq
    TO mightyetl_worker_role;
-- Large (chunked) jobs (migration 00023, internal/lease/chunked.go,
-- internal/chunked): the worker claims from the chunked queue (FOR UPDATE
-- SKIP LOCKED needs UPDATE on one of its columns: enqueued_at only orders
-- a hint), reads the payload's parts and chunks, writes the checkpoint and
-- visibility of a load (never its upload, format or limits), inserts the
-- skipped records' numbers, and after a terminal commit deletes the job's
-- chunks and, of a DISCARDED load, its target rows in batches (by ctid,
-- which needs SELECT on the tables).
GRANT SELECT, DELETE, UPDATE (enqueued_at) ON TABLE etl_chunked_job_queue TO mightyetl_worker_role;
GRANT SELECT, UPDATE (load_state, records_total, chunks_done, records_loaded, bad_records, next_part_number,
                      next_part_offset, next_record_number, failed_record_number, checkpoint_at, updated_at)
    ON TABLE etl_chunked_loads TO mightyetl_worker_role;
GRANT INSERT ON TABLE etl_chunked_load_bad_records TO mightyetl_worker_role;
GRANT SELECT ON TABLE etl_upload_parts TO mightyetl_worker_role;
GRANT SELECT, DELETE ON TABLE etl_upload_chunks TO mightyetl_worker_role;
GRANT SELECT, DELETE ON TABLE processed_data TO mightyetl_worker_role;

------------------------------------------------------------------------------
-- Intake: submit (insert job + claim-queue row + outbox row), status, list,
-- cancel, replay, and the synchronous ETL path (ledger + processed_data).
--   * SELECT only of the columns it reads (internal/pg: jobColumns, the
--     submission lookup, the replay source, the cancelled row's key hash).
--     Never request_payload (a replay is sent its payload again and compared
--     by digest) and never the lease columns.
--   * INSERT only of the columns a submission or replay sets; everything
--     else takes its default (PENDING, no attempt, no lease).
--   * No UPDATE of any column that holds state. Cancellation runs in the
--     SECURITY DEFINER function etl_cancel_job (migration 00009), the only
--     way the intake clears a payload and a lease; it can never write one.
--   * UPDATE (principal_scope_hash) only because SELECT ... FOR UPDATE (the
--     replay's source lock) needs UPDATE privilege on some column. The owner
--     of a job never changes: etl_job_owner_immutable_guard_trigger
--     (migration 00007) refuses any other value, so the grant writes nothing.
--   * No access to the fencing sequence: the intake can never claim.
------------------------------------------------------------------------------
GRANT SELECT (job_record_id, job_kind, principal_scope_hash, submission_key_hash, request_digest,
              job_status, attempt_count, max_attempts, available_at, failure_code,
              created_at, updated_at, cancellation_key_hash, cancellation_code, job_cancelled_at,
              replay_source_job_record_id, replay_root_job_record_id, replay_generation_count,
              job_priority)
    ON TABLE etl_job_records TO mightyetl_intake_role;
GRANT INSERT (job_record_id, job_kind, principal_scope_hash, submission_key_hash,
              request_digest, request_payload, max_attempts,
              replay_source_job_record_id, replay_root_job_record_id, replay_generation_count,
              submit_traceparent, job_priority, available_at)
    ON TABLE etl_job_records TO mightyetl_intake_role;
GRANT UPDATE (principal_scope_hash) ON TABLE etl_job_records TO mightyetl_intake_role;
GRANT EXECUTE ON FUNCTION etl_cancel_job(uuid, text, text) TO mightyetl_intake_role;
-- Operator console (migration 00010): an operator's cancellation of any
-- owner's job, and reads of the lease columns, the payload's record count,
-- the claim queue, the claim/finish counters and the outbox backlog, each a
-- SECURITY DEFINER function that returns no payload, key or lease id, so the
-- column grants above stay as they are.
GRANT EXECUTE ON FUNCTION etl_operator_cancel_job(uuid, text, text), etl_ops_job_private(uuid),
                          etl_ops_active_jobs(integer), etl_ops_counters(), etl_ops_outbox_backlog(integer)
    TO mightyetl_intake_role;
-- The operator's replay (migration 00011): locks any owner's FAILED or
-- CANCELLED source and inserts the replay job for that owner, with its
-- claim-queue and outbox rows, after checking the resent body's digest; the
-- intake role still never reads a payload or another owner's row directly.
GRANT EXECUTE ON FUNCTION etl_operator_replay_job(uuid, text, text, text, text, uuid) TO mightyetl_intake_role;
-- The operator audit (migration 00020) is append-only: the operator's
-- cancellation and replay statements insert its rows (never the id or
-- created_at: the identity and the database clock decide them) and the
-- console reads them; no UPDATE, DELETE or TRUNCATE. Only retention deletes
-- rows older than its window: `etlctl prune` run as the owner (the
-- migrator), or the worker fleet's elected maintainer
-- (mightyetl_maintenance_role, below).
GRANT SELECT ON TABLE etl_operator_audit_records TO mightyetl_intake_role;
GRANT INSERT (operator_principal_scope_hash, operator_action, job_record_id, replay_job_record_id,
              bulk_filter, job_count, outcome_code)
    ON TABLE etl_operator_audit_records TO mightyetl_intake_role;
GRANT SELECT, INSERT ON TABLE etl_idempotency_records TO mightyetl_intake_role;
GRANT INSERT ON TABLE etl_outbox_events TO mightyetl_intake_role;
-- Submit and replay queue new jobs (cancellation dequeues inside etl_cancel_job).
GRANT INSERT ON TABLE etl_job_claim_queue TO mightyetl_intake_role;
-- The console overview counts claimable jobs by owner slot and priority
-- (internal/pg/ops_owners.go): when, whose (the hash's first 8 bytes, which
-- the intake already reads whole on etl_job_records) and how urgent, never
-- which job.
GRANT SELECT (claimable_at, owner_slot, priority) ON TABLE etl_job_claim_queue TO mightyetl_intake_role;
-- A job insert makes its owner due (migration 00025: ON CONFLICT DO UPDATE
-- needs SELECT and UPDATE of the columns it reads and sets); the intake
-- writes the configured owner weights at start.
GRANT SELECT, INSERT (owner_slot, due_at, idle_visits, weight),
      UPDATE (due_at, idle_visits, weight, updated_at)
    ON TABLE etl_claim_owners TO mightyetl_intake_role;
GRANT INSERT ON TABLE processed_data TO mightyetl_intake_role;
GRANT USAGE ON SEQUENCE processed_data_processed_data_id_seq TO mightyetl_intake_role;
-- Large-job uploads (migration 00023, internal/pg/uploads.go): the intake
-- creates, reads, deletes (abort) and stages uploads (state, staged bytes,
-- expiry, the job it made: FOR UPDATE of the owner's uploads needs these
-- UPDATE grants anyway), writes parts (ON CONFLICT DO UPDATE replaces an
-- attempt) and their chunks (COPY), reads them back to verify a
-- submission, and deletes an aborted upload's or a replaced attempt's
-- chunks. A submission inserts the chunked job's queue and load rows (the
-- load's identity and limits only: its checkpoint and visibility are the
-- worker's). Progress and bad records are read for the job representation.
GRANT SELECT, DELETE, INSERT (upload_id, principal_scope_hash, upload_format, expires_at),
      UPDATE (upload_state, staged_bytes, job_record_id, updated_at, expires_at)
    ON TABLE etl_uploads TO mightyetl_intake_role;
GRANT SELECT, DELETE, INSERT (upload_id, part_number, part_attempt_id, part_bytes, part_sha256, chunk_count),
      UPDATE (part_attempt_id, part_bytes, part_sha256, chunk_count, committed_at)
    ON TABLE etl_upload_parts TO mightyetl_intake_role;
GRANT SELECT, INSERT, DELETE ON TABLE etl_upload_chunks TO mightyetl_intake_role;
GRANT INSERT ON TABLE etl_chunked_job_queue TO mightyetl_intake_role;
-- The pending-jobs quota counts an owner's unfinished large jobs through
-- their queue rows (pg.CountOwnerPendingJobs).
GRANT SELECT (job_record_id) ON TABLE etl_chunked_job_queue TO mightyetl_intake_role;
GRANT SELECT, INSERT (job_record_id, upload_id, load_format, max_bad_records, payload_bytes, records_total)
    ON TABLE etl_chunked_loads TO mightyetl_intake_role;
GRANT SELECT ON TABLE etl_chunked_load_bad_records TO mightyetl_intake_role;
-- processed_data_visible, what readers of loaded data read, is granted to
-- no application role, as processed_data's data is not: a reader role of
-- the deployment gets SELECT on the view (not the table) from its owner.

------------------------------------------------------------------------------
-- Outbox relay (internal/outbox): read, lock and delete outbox rows; nothing
-- else. SELECT ... FOR UPDATE SKIP LOCKED requires UPDATE privilege on at
-- least one column. outbox_event_id is GENERATED ALWAYS AS IDENTITY, so the
-- only UPDATE PostgreSQL accepts on it is SET outbox_event_id = DEFAULT: the
-- relay cannot write a chosen value into any outbox column.
------------------------------------------------------------------------------
GRANT SELECT, DELETE ON TABLE etl_outbox_events TO mightyetl_relay_role;
GRANT UPDATE (outbox_event_id) ON TABLE etl_outbox_events TO mightyetl_relay_role;
-- With tracing on, lifecycle events carry the job's submit traceparent
-- (migration 00012): the relay reads that column by job id and no other.
GRANT SELECT (job_record_id, submit_traceparent) ON TABLE etl_job_records TO mightyetl_relay_role;

------------------------------------------------------------------------------
-- Maintenance (internal/maintenance, docs/operations/maintenance.md): the
-- worker fleet's elected retention, the statements of `etlctl prune` under a
-- leader row (migration 00022).
--   * The leader row: take (INSERT ... ON CONFLICT DO UPDATE), renew and
--     fence (UPDATE), resign (DELETE).
--   * DELETE of terminal jobs, ledger, outbox, audit and orphan claim-queue
--     rows, and SELECT of only the columns the statements (and the lineage
--     guard of 00017, which runs as the deleting role) read: never a
--     payload, and of the ledger only its hashed primary key.
--   * SELECT ... FOR UPDATE SKIP LOCKED needs UPDATE privilege on some
--     column: the identity columns of the outbox and the audit (GENERATED
--     ALWAYS, so no value can be written), the job's updated_at (the worker
--     role may write it already) and the ledger's created_at (moving it
--     only moves that row's own retention).
------------------------------------------------------------------------------
GRANT SELECT, INSERT, DELETE, UPDATE ON TABLE etl_maintenance_leader TO mightyetl_maintenance_role;
GRANT SELECT (job_record_id, job_status, updated_at, replay_source_job_record_id, replay_root_job_record_id),
      UPDATE (updated_at), DELETE
    ON TABLE etl_job_records TO mightyetl_maintenance_role;
GRANT SELECT, DELETE ON TABLE etl_job_claim_queue TO mightyetl_maintenance_role;
GRANT SELECT (principal_scope_hash, idempotency_key_hash, created_at), UPDATE (created_at), DELETE
    ON TABLE etl_idempotency_records TO mightyetl_maintenance_role;
GRANT SELECT (outbox_event_id, occurred_at), UPDATE (outbox_event_id), DELETE
    ON TABLE etl_outbox_events TO mightyetl_maintenance_role;
GRANT SELECT (audit_record_id, created_at), UPDATE (audit_record_id), DELETE
    ON TABLE etl_operator_audit_records TO mightyetl_maintenance_role;
-- Large jobs' retention (migration 00023, internal/pg/prune_chunked.go):
-- plain DELETEs of bounded batches (no FOR UPDATE, so no UPDATE privilege
-- on these tables) reading only keys, states and times: never a chunk's
-- bytes, a target row's data or a principal. The one UPDATE marks the load
-- of a FAILED or CANCELLED job DISCARDED before its target rows go.
GRANT SELECT (job_record_id), DELETE ON TABLE etl_chunked_job_queue TO mightyetl_maintenance_role;
GRANT SELECT (job_record_id, load_state), UPDATE (load_state, updated_at), DELETE
    ON TABLE etl_chunked_loads TO mightyetl_maintenance_role;
GRANT SELECT (job_record_id, record_number), DELETE ON TABLE etl_chunked_load_bad_records TO mightyetl_maintenance_role;
GRANT SELECT (processed_data_id, job_record_id), DELETE ON TABLE processed_data TO mightyetl_maintenance_role;
GRANT SELECT (upload_id, upload_state, job_record_id, expires_at), DELETE ON TABLE etl_uploads TO mightyetl_maintenance_role;
GRANT SELECT (upload_id, part_number, part_attempt_id), DELETE ON TABLE etl_upload_parts TO mightyetl_maintenance_role;
GRANT SELECT (upload_id, part_attempt_id, chunk_index), DELETE ON TABLE etl_upload_chunks TO mightyetl_maintenance_role;

COMMIT;
