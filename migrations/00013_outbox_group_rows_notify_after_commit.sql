-- Outbox group rows (migration 00006: one row carrying the job ids of an
-- insert, a finish group or a replay) no longer NOTIFY inside their
-- transaction. PostgreSQL serialises the commits of notifying transactions
-- on one database-wide lock that is held through the commit's WAL flush, so
-- every intake group commit and every worker finish waited for the previous
-- one and none could share a flush. The writers of group rows wake the
-- relays after their commit instead, from a transaction of their own
-- (pg.OutboxNotifier), which writes no WAL and holds that lock for
-- microseconds. Single-job rows (cancellation, retry, failure, exhaustion,
-- operator actions) keep notifying at commit: they are rare and their
-- writers include SQL functions. A wake-up lost to a crash between commit
-- and notify costs the relay's poll interval; the rows are durable.

-- +goose Up
-- +goose StatementBegin
DROP TRIGGER IF EXISTS etl_outbox_notify_relay_trigger ON etl_outbox_events;
CREATE TRIGGER etl_outbox_notify_relay_trigger
    AFTER INSERT ON etl_outbox_events
    FOR EACH ROW WHEN (NEW.job_record_ids IS NULL)
    EXECUTE FUNCTION etl_outbox_notify_relay();
-- +goose StatementEnd

-- +goose Down
-- Down restores 00004's trigger (notify once per statement, only when it
-- inserted rows), the one in place before this migration. Until issue 29 it
-- restored 00001's statement trigger instead, which notifies at the commit
-- of every inserting statement, even one that inserted no row. A released
-- migration's up never changes; this down section was corrected in place
-- because a down can be repaired nowhere else.
-- +goose StatementBegin
DROP TRIGGER IF EXISTS etl_outbox_notify_relay_trigger ON etl_outbox_events;
CREATE TRIGGER etl_outbox_notify_relay_trigger
    AFTER INSERT ON etl_outbox_events
    REFERENCING NEW TABLE AS inserted_outbox_rows
    FOR EACH STATEMENT EXECUTE FUNCTION etl_outbox_notify_relay_when_inserted();
-- +goose StatementEnd
