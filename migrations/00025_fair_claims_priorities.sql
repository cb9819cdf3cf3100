-- +goose NO TRANSACTION
-- Many owners on one fleet (issue 33): fair claiming across owners,
-- priorities, scheduled jobs.
--
-- etl_job_claim_queue gains the job's owner slot (the first 8 bytes of its
-- principal_scope_hash as a bigint: the fairness bucket) and its priority
-- (1 highest .. 4 lowest, default 2). etl_claim_owners holds one row per
-- owner slot that has had queued jobs: when the owner is next due for a
-- claim (due_at: the last time it was served while it has claimable work,
-- later while it has none), how many claims in a row found it empty, and its
-- weight. The claim walks the due owners least recently served first (its
-- index) and, per owner, the queue's owner index by priority: O(owners per
-- claim + batch) whatever the table or the number of owners
-- (internal/lease, fairClaimSQL). etl_job_records gains job_priority, which
-- status and lists show; a scheduled job is a job whose available_at (and
-- so its queue row's claimable_at) is in the future: no column of its own.
--
-- Binaries of levels 1 and 2 keep running on this schema: the new columns
-- are nullable or have constant defaults, old intakes insert queue rows
-- without an owner slot (claimed first-come first-served by the oldest share
-- of every claim, as every row queued before this migration is), old
-- workers claim first-come first-served by the eligibility index, which
-- stays. No backfill: the rows queued before it drain through that share.
--
-- Online: ADD COLUMN with a constant default is a catalog change (no
-- rewrite) under a brief ACCESS EXCLUSIVE lock bounded by lock_timeout; the
-- CHECKs are added NOT VALID and validated in their own statements (SHARE
-- UPDATE EXCLUSIVE); the index is built CONCURRENTLY, so no transaction
-- (goose NO TRANSACTION) and SET rather than SET LOCAL: it holds for this
-- migration's connection, which the runner closes afterwards. Re-runnable
-- from its first statement (the runner retries a file that fails on a lock
-- timeout; a concurrent build that failed leaves an invalid index, which the
-- DROP ... IF EXISTS before the build removes).

-- +goose Up
SET lock_timeout = '1s';
SET statement_timeout = '5s';
ALTER TABLE etl_job_records ADD COLUMN IF NOT EXISTS job_priority bigint NOT NULL DEFAULT 2;
ALTER TABLE etl_job_records DROP CONSTRAINT IF EXISTS etl_job_priority_range_check;
ALTER TABLE etl_job_records ADD CONSTRAINT etl_job_priority_range_check CHECK (job_priority BETWEEN 1 AND 4) NOT VALID;
ALTER TABLE etl_job_claim_queue ADD COLUMN IF NOT EXISTS owner_slot bigint;
ALTER TABLE etl_job_claim_queue ADD COLUMN IF NOT EXISTS priority bigint NOT NULL DEFAULT 2;
ALTER TABLE etl_job_claim_queue DROP CONSTRAINT IF EXISTS etl_job_claim_queue_priority_range_check;
ALTER TABLE etl_job_claim_queue ADD CONSTRAINT etl_job_claim_queue_priority_range_check CHECK (priority BETWEEN 1 AND 4) NOT VALID;
SET statement_timeout = '30min';
ALTER TABLE etl_job_records VALIDATE CONSTRAINT etl_job_priority_range_check;
ALTER TABLE etl_job_claim_queue VALIDATE CONSTRAINT etl_job_claim_queue_priority_range_check;

-- One row per owner slot. Small (one row per owner) and updated by every
-- claim that serves the owner, so it keeps room on its pages for HOT-free
-- updates to stay local; autovacuum keeps it small.
SET statement_timeout = '5s';
CREATE TABLE IF NOT EXISTS etl_claim_owners (
    owner_slot  bigint      PRIMARY KEY,
    -- The owner is offered to claims once due_at has passed (database
    -- clock), least recently served first.
    due_at      timestamptz NOT NULL,
    -- Claims in a row that found no claimable job of this owner: each one
    -- doubles the wait before the next look (50 ms .. 10 s), so owners
    -- without work cost little.
    idle_visits bigint      NOT NULL DEFAULT 0,
    -- The owner's share of a claim against the other owners in it.
    weight      bigint      NOT NULL DEFAULT 1,
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT etl_claim_owners_weight_range_check CHECK (weight BETWEEN 1 AND 1000),
    CONSTRAINT etl_claim_owners_idle_visits_range_check CHECK (idle_visits BETWEEN 0 AND 1000)
) WITH (fillfactor = 50);
CREATE INDEX CONCURRENTLY IF NOT EXISTS etl_claim_owners_due_index ON etl_claim_owners (due_at, owner_slot);

-- The claim's per-owner walk: one owner, one priority, claimable up to "now",
-- oldest first. Rows without an owner slot (queued by older intakes, or
-- before this migration) are left out: the claim's oldest share walks
-- etl_job_claim_queue_eligibility_index for them.
SET statement_timeout = '30min';
DROP INDEX CONCURRENTLY IF EXISTS etl_job_claim_queue_owner_index;
CREATE INDEX CONCURRENTLY IF NOT EXISTS etl_job_claim_queue_owner_index
    ON etl_job_claim_queue (owner_slot, priority, claimable_at, job_record_id)
    WHERE owner_slot IS NOT NULL;

SET statement_timeout = '5s';
INSERT INTO etl_schema_compatibility (schema_version, oldest_compatible_binary) VALUES (25, 1)
ON CONFLICT (schema_version) DO NOTHING;

-- +goose Down
-- Priorities and owner slots are dropped: binaries below level 3 claim
-- first-come first-served and know neither. Scheduled jobs stay scheduled
-- (available_at is theirs too).
SET lock_timeout = '1s';
SET statement_timeout = '30min';
DROP INDEX CONCURRENTLY IF EXISTS etl_job_claim_queue_owner_index;
SET statement_timeout = '5s';
DROP TABLE IF EXISTS etl_claim_owners;
ALTER TABLE etl_job_claim_queue DROP CONSTRAINT IF EXISTS etl_job_claim_queue_priority_range_check;
ALTER TABLE etl_job_claim_queue DROP COLUMN IF EXISTS priority;
ALTER TABLE etl_job_claim_queue DROP COLUMN IF EXISTS owner_slot;
ALTER TABLE etl_job_records DROP CONSTRAINT IF EXISTS etl_job_priority_range_check;
ALTER TABLE etl_job_records DROP COLUMN IF EXISTS job_priority;
DELETE FROM etl_schema_compatibility WHERE schema_version = 25;
