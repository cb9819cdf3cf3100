package pg

import (
	"context"
	"fmt"

	"github.com/google/uuid"
)

// LedgerEntry is one row of the response ledger (etl_idempotency_records).
type LedgerEntry struct {
	PrincipalScopeHash string
	IdempotencyKeyHash string
	RequestDigest      string
	ResponseText       string
	// JobID is the job that wrote the row; uuid.Nil (NULL) for the
	// synchronous path.
	JobID uuid.UUID
}

// claimLedgerSQL inserts a ledger row unless (principal, key) already has
// one. Lock: a concurrent insert of the same key waits on the unique index
// entry until the first transaction ends, then inserts nothing (first
// committed) or inserts (first rolled back), so two requests with one key
// never both proceed.
const claimLedgerSQL = `
INSERT INTO etl_idempotency_records (principal_scope_hash, idempotency_key_hash, request_digest, response_text, job_record_id)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (principal_scope_hash, idempotency_key_hash) DO NOTHING`

const readLedgerSQL = `
SELECT request_digest, response_text, job_record_id FROM etl_idempotency_records
WHERE principal_scope_hash = $1 AND idempotency_key_hash = $2`

// ClaimLedgerEntry inserts e on db (normally the caller's transaction, so
// the row commits with the work it records). It returns (e, true) when it
// inserted the row and (existing, false) when the key already had a
// committed row; compare RequestDigest to tell a replay from a key reuse.
func ClaimLedgerEntry(ctx context.Context, db DBTX, e LedgerEntry) (LedgerEntry, bool, error) {
	var job *uuid.UUID
	if e.JobID != uuid.Nil {
		job = &e.JobID
	}
	tag, err := db.Exec(ctx, claimLedgerSQL, e.PrincipalScopeHash, e.IdempotencyKeyHash, e.RequestDigest, e.ResponseText, job)
	if err != nil {
		return LedgerEntry{}, false, fmt.Errorf("claim ledger entry: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return e, true, nil
	}
	existing := LedgerEntry{PrincipalScopeHash: e.PrincipalScopeHash, IdempotencyKeyHash: e.IdempotencyKeyHash}
	var existingJob *uuid.UUID
	err = db.QueryRow(ctx, readLedgerSQL, e.PrincipalScopeHash, e.IdempotencyKeyHash).
		Scan(&existing.RequestDigest, &existing.ResponseText, &existingJob)
	if IsNoRows(err) {
		// Pruned between the two statements: the caller may retry.
		return LedgerEntry{}, false, fmt.Errorf("read ledger entry: %w", ErrConflictVanished)
	}
	if err != nil {
		return LedgerEntry{}, false, fmt.Errorf("read ledger entry: %w", err)
	}
	if existingJob != nil {
		existing.JobID = *existingJob
	}
	return existing, false, nil
}
