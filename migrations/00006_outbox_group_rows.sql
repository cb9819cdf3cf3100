-- One outbox row per finish group.
--
-- A worker's finish transaction commits many jobs at once (group commit),
-- and the intake inserts many jobs in one statement (group commit).
-- Until now it wrote one etl_outbox_events row per job: one heap tuple and
-- one primary-key entry per job, and one more row for the relay to lock,
-- read and delete. A group row carries the jobs of the group as two parallel
-- arrays (job_record_ids, attempt_counts), one row per group. The relay
-- expands it into one lifecycle CloudEvent per job, each with a stable id
-- "<outbox_event_id>-<index>" (0-based position in the arrays), used as the
-- event id and the JetStream Nats-Msg-Id, so a relay that crashes and
-- republishes a group emits the same ids and JetStream drops the copies.
-- A plain row keeps its id "<outbox_event_id>". The intake's job_available
-- rows (advisory wake-ups, which the relay coalesces into one message per
-- batch anyway) are grouped the same way, one per insert statement.
-- etl_outbox_job_events shows one row per job event, plain and grouped alike.

-- +goose Up
-- +goose StatementBegin
ALTER TABLE etl_outbox_events
    ADD COLUMN job_record_ids uuid[],
    ADD COLUMN attempt_counts integer[];

ALTER TABLE etl_outbox_events DROP CONSTRAINT etl_outbox_lifecycle_shape_check;
ALTER TABLE etl_outbox_events ADD CONSTRAINT etl_outbox_lifecycle_shape_check CHECK (
    event_kind <> 'job_lifecycle'
    OR (job_status IS NOT NULL
        AND ((job_record_id IS NOT NULL AND job_record_ids IS NULL AND attempt_counts IS NULL)
          OR (job_record_id IS NULL AND attempt_count IS NULL
              AND job_record_ids IS NOT NULL AND attempt_counts IS NOT NULL))));
-- Group arrays: one-dimensional, 1..10,000 members, parallel, no NULLs, and
-- only on lifecycle rows and job_available rows (one per submit statement,
-- for the jobs it inserted), never on a single job's row.
ALTER TABLE etl_outbox_events ADD CONSTRAINT etl_outbox_group_shape_check CHECK (
    (job_record_ids IS NULL AND attempt_counts IS NULL)
    OR (event_kind IN ('job_lifecycle', 'job_available') AND job_record_id IS NULL AND attempt_count IS NULL
        AND array_ndims(job_record_ids) = 1 AND array_ndims(attempt_counts) = 1
        AND cardinality(job_record_ids) BETWEEN 1 AND 10000
        AND cardinality(attempt_counts) = cardinality(job_record_ids)
        AND array_position(job_record_ids, NULL) IS NULL
        AND array_position(attempt_counts, NULL) IS NULL));

CREATE VIEW etl_outbox_job_events AS
SELECT o.outbox_event_id, o.outbox_event_id::text AS event_id, o.event_kind, o.job_record_id,
       o.job_status, o.attempt_count, o.event_code, o.occurred_at
FROM etl_outbox_events o
WHERE o.job_record_ids IS NULL
UNION ALL
SELECT o.outbox_event_id, o.outbox_event_id::text || '-' || (m.ordinal - 1)::text, o.event_kind, m.job_record_id,
       o.job_status, m.attempt_count, o.event_code, o.occurred_at
FROM etl_outbox_events o
CROSS JOIN LATERAL unnest(o.job_record_ids, o.attempt_counts) WITH ORDINALITY AS m(job_record_id, attempt_count, ordinal)
WHERE o.job_record_ids IS NOT NULL;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
-- Group rows become plain rows (new outbox ids, so events not yet published
-- get new ids; consumers already deduplicate by job id and status).
INSERT INTO etl_outbox_events (event_kind, job_record_id, job_status, attempt_count, event_code, occurred_at)
SELECT o.event_kind, m.job_record_id, o.job_status, m.attempt_count, o.event_code, o.occurred_at
FROM etl_outbox_events o
CROSS JOIN LATERAL unnest(o.job_record_ids, o.attempt_counts) WITH ORDINALITY AS m(job_record_id, attempt_count, ordinal)
WHERE o.job_record_ids IS NOT NULL
ORDER BY o.outbox_event_id, m.ordinal;
DELETE FROM etl_outbox_events WHERE job_record_ids IS NOT NULL;
DROP VIEW IF EXISTS etl_outbox_job_events;
ALTER TABLE etl_outbox_events DROP CONSTRAINT etl_outbox_group_shape_check;
ALTER TABLE etl_outbox_events DROP CONSTRAINT etl_outbox_lifecycle_shape_check;
ALTER TABLE etl_outbox_events ADD CONSTRAINT etl_outbox_lifecycle_shape_check CHECK (
    event_kind <> 'job_lifecycle' OR (job_record_id IS NOT NULL AND job_status IS NOT NULL));
ALTER TABLE etl_outbox_events DROP COLUMN attempt_counts, DROP COLUMN job_record_ids;
-- +goose StatementEnd
