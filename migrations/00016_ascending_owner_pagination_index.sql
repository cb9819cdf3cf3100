-- The owner pagination index in ascending order (issue 11).
-- etl_job_owner_pagination_index was (principal_scope_hash, created_at DESC,
-- job_record_id DESC): every new job of an owner sorts first in the owner's
-- range, so each insert lands at the left end of it. A B-tree splits a full
-- page there in half and never fills the older half again, so the index
-- grew at about twice its entries' size, and an owner whose range is the
-- last in the index (with one busy owner: the whole index) never got the
-- right-end fast path, which skips the descent and splits at the
-- fillfactor. Ascending, the newest entries go to the right end of the
-- owner's range. Owners' lists read it backwards, which a B-tree does as
-- cheaply (Index Scan Backward; the keyset predicate
-- (created_at, job_record_id) < cursor is an index condition either way):
-- TestListJobsReadsThePaginationIndexBackwards pins the plan.
--
-- Measured: inserting 300,000 jobs of one owner in statements of 2,000, one
-- connection, alternating with the descending index: 804 and 805 WAL bytes
-- per job against 870 and 872. With many owners each owner's inserts still
-- land inside the index (at the end of the owner's range), where either
-- order splits pages in half.
--
-- goose runs this file in one transaction, so the ACCESS EXCLUSIVE lock
-- that DROP INDEX takes on etl_job_records is held until the new index is
-- built and the transaction commits: every read and write of the table
-- waits for the whole rebuild. Plan it as downtime on a large table.

-- +goose Up
DROP INDEX etl_job_owner_pagination_index;
CREATE INDEX etl_job_owner_pagination_index
    ON etl_job_records (principal_scope_hash, created_at, job_record_id);

-- +goose Down
DROP INDEX etl_job_owner_pagination_index;
CREATE INDEX etl_job_owner_pagination_index
    ON etl_job_records (principal_scope_hash, created_at DESC, job_record_id DESC);
