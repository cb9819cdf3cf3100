// Package intake holds the use cases of the job API with no transport in
// them: submit (with group commit), status, list, cancel and the synchronous
// process path. The HTTP API (internal/httpapi) and the NATS request consumer
// both call a [Service]; only they turn its typed [*Error] codes into
// problem responses or rejection messages.
//
// Invariants the Service keeps:
//
//   - A request body is validated and transformed in full before any database
//     write, so an invalid record never creates a job or a ledger row.
//   - Nothing raw is stored: principals become principal_scope_hash (a keyed
//     HMAC), idempotency keys become domain-separated SHA-256 hashes, and the
//     body is stored only as the payload of a live job with its SHA-256 digest.
//   - A new job and its outbox row commit in one transaction; concurrent
//     submissions share transactions (group commit) without changing any
//     per-request outcome.
//   - Same principal, same key, byte-identical body (and kind) returns the
//     existing job (Replayed); another body under the key is
//     etl_job_submission_key_reused. Concurrent identical submissions converge
//     on one job: exactly one result has Replayed false.
//   - Owner scoping: every read and write is keyed by principal_scope_hash; a
//     foreign job is indistinguishable from an absent one (etl_job_not_found).
//   - Errors never carry payload, principal, key, hash or database text in
//     their Error() string, so they may be logged.
package intake
