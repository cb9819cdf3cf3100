-- Hot-path storage: a narrow claim queue beside the durable job row.
--
-- Before this migration every claim, renewal and finish changed a column
-- that an index of etl_job_records depends on (job_status in the predicates
-- of the claim-eligibility and lease-expiry partial indexes, available_at and
-- lease_expires_at as their keys). PostgreSQL then cannot update the row
-- "HOT": it writes a new entry into EVERY index of the wide row (primary key,
-- submission-key unique, owner pagination, owner-scoped identity), four to
-- five random index inserts and their WAL per job transition.
--
-- Now eligibility lives in etl_job_claim_queue: one narrow row per PENDING or
-- RUNNING job, keyed by job id, with the time it becomes claimable
-- (available_at while PENDING, lease_expires_at while RUNNING). The wide row
-- keeps every column operators read and every lease column with its name and
-- its lifecycle CHECKs, but no index of etl_job_records depends on a column
-- that a transition changes, so with free space on the page (fillfactor) its
-- transitions are HOT: heap-only, no index entry at all.
--
-- The queue row is a hint, never an authority: the claim re-checks the wide
-- row (status, available_at, lease expiry) under its row lock, and every
-- fenced write still matches the whole exact lease on etl_job_records. The
-- statements that change a job's state keep the queue row in step in the same
-- statement: insert with the job, move claimable_at on claim, renewal, retry
-- and release, delete on any terminal transition (success, failure,
-- exhaustion, cancellation). docs/architecture.md shows the join.

-- +goose Up
-- +goose StatementBegin
CREATE TABLE etl_job_claim_queue (
    job_record_id uuid        PRIMARY KEY,
    claimable_at  timestamptz NOT NULL
) WITH (fillfactor = 90);

-- No foreign key to etl_job_records: its check is one lookup and one row
-- lock per inserted queue row (measured: a fifth of a job insert's cost). A
-- queue row is only ever written by a statement that writes its job row in
-- the same statement, and deleting jobs removes their queue rows here, once
-- per DELETE statement (prune deletes terminal jobs, which have none). A
-- queue row without a job is harmless to correctness, because the claim
-- joins every candidate to its job row and skips it; etlctl prune removes
-- any such row.
CREATE FUNCTION etl_job_claim_queue_cascade() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    DELETE FROM etl_job_claim_queue q
    WHERE q.job_record_id = ANY(ARRAY(SELECT job_record_id FROM deleted_job_rows));
    RETURN NULL;
END;
$fn$;
CREATE TRIGGER etl_job_claim_queue_cascade_trigger
    AFTER DELETE ON etl_job_records
    REFERENCING OLD TABLE AS deleted_job_rows
    FOR EACH STATEMENT EXECUTE FUNCTION etl_job_claim_queue_cascade();

INSERT INTO etl_job_claim_queue (job_record_id, claimable_at)
SELECT job_record_id, CASE WHEN job_status = 'PENDING' THEN available_at ELSE lease_expires_at END
FROM etl_job_records
WHERE job_status IN ('PENDING', 'RUNNING');

-- The claim walks this index up to the database's "now": O(batch) at any
-- table size. job_record_id (time-ordered for new jobs) breaks ties FIFO.
CREATE INDEX etl_job_claim_queue_eligibility_index
    ON etl_job_claim_queue (claimable_at, job_record_id);

-- Gone from the wide row: nothing indexes a column a transition changes.
DROP INDEX IF EXISTS etl_job_claim_eligibility_index;
DROP INDEX IF EXISTS etl_job_lease_expiry_index;

-- Room on each page for the new version of every row on it, so claim,
-- renewal and finish stay on the page (HOT). A claimed version is larger than
-- the inserted one (it gains the four lease columns), so 50% is not enough
-- for a page filled by one insert burst (measured: about one row per page
-- then updates non-HOT); 40% leaves room for a whole page of claimed
-- versions. Dead versions are pruned when a page runs short of its free-space
-- target, before the next transition. Applies to pages written from now on.
ALTER TABLE etl_job_records SET (fillfactor = 40);

-- PostgreSQL evaluates every CHECK constraint of a row on every UPDATE, even
-- of columns the statement does not touch, and the regular expressions of
-- 00001/00002 are slow in its regex engine because of their bounded
-- repetition ({64}, {8,128}, {2,127}), which compiles into that many states:
-- measured per value, 8 us for a 64-character hex digest and 26 us for an
-- owner id, more than the HOT update itself. Two changes:
--
-- 1. Each format is a domain whose CHECK keeps the old constraint name, so a
--    violation reports the same constraint (23514). A domain's CHECK runs only
--    when a value is assigned to the column: at insert for the identity
--    hashes and the digest (never changed after), at claim for the owner id,
--    at failure for the code; never on the other transitions.
-- 2. The same sets are written without bounded repetition: a length test and
--    a negated character class (">= 1 character outside the set"), about
--    0.5 us each. Only ASCII is accepted, so octet_length is the character
--    count of every accepted value; any other character fails the class test.
--    constraints_test.go and TestMigration00005... pin both sides of each rule.
CREATE DOMAIN etl_job_principal_scope_hash AS text
    CONSTRAINT etl_job_principal_scope_hash_format_check
    CHECK (octet_length(VALUE) = 64 AND VALUE !~ '[^0-9a-f]');
CREATE DOMAIN etl_job_submission_key_hash AS text
    CONSTRAINT etl_job_submission_key_hash_format_check
    CHECK (octet_length(VALUE) = 64 AND VALUE !~ '[^0-9a-f]');
CREATE DOMAIN etl_job_request_digest AS text
    CONSTRAINT etl_job_request_digest_format_check
    CHECK (octet_length(VALUE) = 64 AND VALUE !~ '[^0-9a-f]');
CREATE DOMAIN etl_job_cancellation_key_hash AS text
    CONSTRAINT etl_job_cancellation_key_hash_format_check
    CHECK (octet_length(VALUE) = 64 AND VALUE !~ '[^0-9a-f]');
CREATE DOMAIN etl_job_lease_owner_id AS text
    CONSTRAINT etl_job_lease_owner_format_check
    CHECK (octet_length(VALUE) BETWEEN 8 AND 128 AND VALUE !~ '[^A-Za-z0-9._:-]');
CREATE DOMAIN etl_job_failure_code AS text
    CONSTRAINT etl_job_failure_code_format_check
    CHECK (octet_length(VALUE) BETWEEN 3 AND 128 AND VALUE ~ '^[a-z][a-z0-9_]*$');
ALTER TABLE etl_job_records
    DROP CONSTRAINT etl_job_principal_scope_hash_format_check,
    DROP CONSTRAINT etl_job_submission_key_hash_format_check,
    DROP CONSTRAINT etl_job_request_digest_format_check,
    DROP CONSTRAINT etl_job_cancellation_key_hash_format_check,
    DROP CONSTRAINT etl_job_lease_owner_format_check,
    DROP CONSTRAINT etl_job_failure_code_format_check,
    ALTER COLUMN principal_scope_hash  TYPE etl_job_principal_scope_hash,
    ALTER COLUMN submission_key_hash   TYPE etl_job_submission_key_hash,
    ALTER COLUMN request_digest        TYPE etl_job_request_digest,
    ALTER COLUMN cancellation_key_hash TYPE etl_job_cancellation_key_hash,
    ALTER COLUMN lease_owner_id        TYPE etl_job_lease_owner_id,
    ALTER COLUMN failure_code          TYPE etl_job_failure_code;

-- The insert-only format checks of the ledger and the outbox, rewritten the
-- same way (same names, same accepted sets).
ALTER TABLE etl_idempotency_records
    DROP CONSTRAINT etl_idempotency_principal_scope_hash_format_check,
    DROP CONSTRAINT etl_idempotency_key_hash_format_check,
    DROP CONSTRAINT etl_idempotency_request_digest_format_check,
    ADD CONSTRAINT etl_idempotency_principal_scope_hash_format_check
        CHECK (octet_length(principal_scope_hash) = 64 AND principal_scope_hash !~ '[^0-9a-f]'),
    ADD CONSTRAINT etl_idempotency_key_hash_format_check
        CHECK (octet_length(idempotency_key_hash) = 64 AND idempotency_key_hash !~ '[^0-9a-f]'),
    ADD CONSTRAINT etl_idempotency_request_digest_format_check
        CHECK (octet_length(request_digest) = 64 AND request_digest !~ '[^0-9a-f]');
ALTER TABLE etl_outbox_events
    DROP CONSTRAINT etl_outbox_event_code_format_check,
    ADD CONSTRAINT etl_outbox_event_code_format_check
        CHECK (octet_length(event_code) BETWEEN 3 AND 128 AND event_code ~ '^[a-z][a-z0-9_]*$');

-- Autovacuum the queue often: it is small and every job passes through it.
ALTER TABLE etl_job_claim_queue SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000);
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
ALTER TABLE etl_job_records
    ALTER COLUMN principal_scope_hash  TYPE text,
    ALTER COLUMN submission_key_hash   TYPE text,
    ALTER COLUMN request_digest        TYPE text,
    ALTER COLUMN cancellation_key_hash TYPE text,
    ALTER COLUMN lease_owner_id        TYPE text,
    ALTER COLUMN failure_code          TYPE text,
    ADD CONSTRAINT etl_job_principal_scope_hash_format_check CHECK (principal_scope_hash ~ '^[0-9a-f]{64}$'),
    ADD CONSTRAINT etl_job_submission_key_hash_format_check CHECK (submission_key_hash ~ '^[0-9a-f]{64}$'),
    ADD CONSTRAINT etl_job_request_digest_format_check CHECK (request_digest ~ '^[0-9a-f]{64}$'),
    ADD CONSTRAINT etl_job_cancellation_key_hash_format_check CHECK (cancellation_key_hash ~ '^[0-9a-f]{64}$'),
    ADD CONSTRAINT etl_job_lease_owner_format_check CHECK (lease_owner_id ~ '^[A-Za-z0-9._:-]{8,128}$'),
    ADD CONSTRAINT etl_job_failure_code_format_check CHECK (failure_code ~ '^[a-z][a-z0-9_]{2,127}$');
ALTER TABLE etl_idempotency_records
    DROP CONSTRAINT etl_idempotency_principal_scope_hash_format_check,
    DROP CONSTRAINT etl_idempotency_key_hash_format_check,
    DROP CONSTRAINT etl_idempotency_request_digest_format_check,
    ADD CONSTRAINT etl_idempotency_principal_scope_hash_format_check CHECK (principal_scope_hash ~ '^[0-9a-f]{64}$'),
    ADD CONSTRAINT etl_idempotency_key_hash_format_check CHECK (idempotency_key_hash ~ '^[0-9a-f]{64}$'),
    ADD CONSTRAINT etl_idempotency_request_digest_format_check CHECK (request_digest ~ '^[0-9a-f]{64}$');
ALTER TABLE etl_outbox_events
    DROP CONSTRAINT etl_outbox_event_code_format_check,
    ADD CONSTRAINT etl_outbox_event_code_format_check CHECK (event_code ~ '^[a-z][a-z0-9_]{2,127}$');
DROP DOMAIN etl_job_principal_scope_hash, etl_job_submission_key_hash, etl_job_request_digest,
    etl_job_cancellation_key_hash, etl_job_lease_owner_id, etl_job_failure_code;
ALTER TABLE etl_job_records RESET (fillfactor);
CREATE INDEX IF NOT EXISTS etl_job_claim_eligibility_index
    ON etl_job_records (available_at, job_record_id) WHERE job_status = 'PENDING';
CREATE INDEX IF NOT EXISTS etl_job_lease_expiry_index
    ON etl_job_records (lease_expires_at) WHERE job_status = 'RUNNING';
DROP TRIGGER IF EXISTS etl_job_claim_queue_cascade_trigger ON etl_job_records;
DROP FUNCTION IF EXISTS etl_job_claim_queue_cascade();
DROP TABLE IF EXISTS etl_job_claim_queue;
-- +goose StatementEnd
