-- Job rows at fillfactor 30 (issue 11).
-- Claim and finish change no indexed column of etl_job_records, so each is a
-- HOT update when the page has room for the new version. At fillfactor 40
-- it often had not: a page filled by one insert burst holds about 13 jobs
-- (3.3 kB of a PENDING row each 250 bytes), their claimed versions add
-- about 300 bytes each and their finished versions about 200, 9.9 kB in
-- all, so the finish fits only after PostgreSQL has pruned the inserted
-- versions. It prunes a page only once no running statement's snapshot in
-- the database is older than the claim that made them dead, and with
-- zero-duration jobs the finish comes a few milliseconds after the claim,
-- while claims and inserts of 2,000 rows each run for tens of
-- milliseconds. Measured in the bench's continuous scenario (2,000 slots,
-- River's feed, 30 s): 80-85% of job row updates were HOT (three runs);
-- the rest wrote a new entry into each of the table's three indexes and put
-- the version on another page.
--
-- At 30 a page takes 9 inserted jobs, 2.3 kB, and their claimed and
-- finished versions bring it to 6.8 kB: both fit without pruning. Measured:
-- 100.0% HOT in the same scenario (two runs). A renewal adds one
-- more version; it comes a third of a lease after the claim, when pruning
-- has long been possible. The cost is space: the heap takes 9 jobs per page
-- at insert instead of 13; in those runs it grew by 0.91 kB per job against
-- 0.82 kB at 40.
--
-- Applies to pages written from now on; existing pages keep their rows.

-- +goose Up
ALTER TABLE etl_job_records SET (fillfactor = 30);

-- +goose Down
ALTER TABLE etl_job_records SET (fillfactor = 40);
