// Package pg is mightyETL's PostgreSQL layer: the plumbing every binary
// shares, and the SQL of the store that is not the lease protocol's.
//
// Plumbing: pool construction (NewPool, optionally pinning one generic plan
// per statement and connection), the transaction helper (WithTx), schema
// migration (Migrate and friends, over the embedded migrations), the
// classification of database errors into transient and permanent
// (ErrorClass, IsTransient) and the redaction of URLs and errors before
// they are logged.
//
// Store statements, each a named constant next to the function that runs
// it, with its locks and time source commented there: job insert with its
// claim-queue rows and outbox rows (InsertJobs), reads and keyset lists of
// an owner's jobs (GetJob, ListJobs), cancellation and replay (CancelJob,
// ReplayJob), the idempotency ledger (ClaimLedgerEntry), the operator
// console's reads and actions (Ops*, OperatorCancelJob,
// OperatorBulkCancelJobs, OperatorReplayJob), each writing its operator
// audit row in its own statement, and the audit's reads (ListOperatorAudit),
// the relays' after-commit wake-up (OutboxNotifier) and retention
// (PruneTerminalJobs, PruneLedger, PruneOutbox, PruneOrphanQueueRows,
// PruneOperatorAudit). Claim, renewal and finish live in
// internal/lease, and the relay's batch statements in internal/outbox.
//
// PostgreSQL is the only authority over a job's state. Nothing in this
// package caches or second-guesses what the database decided.
package pg
