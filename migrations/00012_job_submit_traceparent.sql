-- The submit's W3C trace context (issue 16): the traceparent of the span that
-- stored the job, written only when tracing is on and that span is sampled,
-- NULL otherwise. The claim returns it and the worker's execution span links
-- to it (claims are batched, so a link, not a parent); a replay stores the
-- replay request's own context. A traceparent is exactly 55 characters
-- ("00-" + 32 hex trace id + "-" + 16 hex span id + "-" + 2 hex flags), so
-- the column holds no payload, key or principal: the CHECK bounds it.
-- Adding a nullable column without a default rewrites nothing.

-- +goose Up
-- +goose StatementBegin
ALTER TABLE etl_job_records
    ADD COLUMN submit_traceparent text
    CONSTRAINT etl_job_submit_traceparent_length_check CHECK (octet_length(submit_traceparent) <= 55);
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
ALTER TABLE etl_job_records DROP COLUMN submit_traceparent;
-- +goose StatementEnd
