package intake

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/mightyetl/mightyetl/internal/etl"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// ProcessRequest is one synchronous ETL request.
type ProcessRequest struct {
	Principal string
	// IdempotencyKey is optional: empty runs without the response ledger; a
	// non-empty key must be valid (see ValidKey).
	IdempotencyKey string
	Body           []byte
}

// ProcessResult is the response of a synchronous request.
type ProcessResult struct {
	// ResponseText is the "Processed: <id>" lines (see etl.ResponseText).
	ResponseText string
	// Replayed is true when the ledger already held this key and body: the
	// stored response is returned and nothing is loaded again.
	Replayed bool
}

var errLedgerReplay = errors.New("ledger replay")

// Process validates and transforms the whole body, then in one transaction
// records the ledger row (when a key is given) and loads the rows into
// processed_data (job_record_id NULL). With a key already in the ledger: the
// same body replays the stored response (Replayed); another body is
// ErrIdempotencyKeyReused. Concurrent requests with one key wait on each
// other in the ledger's unique index, so the rows load once. Errors as for
// Submit.
func (s *Service) Process(ctx context.Context, req ProcessRequest) (ProcessResult, error) {
	scope, err := s.scope(req.Principal)
	if err != nil {
		return ProcessResult{}, err
	}
	if req.IdempotencyKey != "" && !ValidKey(req.IdempotencyKey) {
		return ProcessResult{}, ErrInvalidIdempotencyKey
	}
	rows, err := etl.Process(req.Body, s.maxRecords)
	if err != nil {
		return ProcessResult{}, fromETL(err)
	}
	res := ProcessResult{ResponseText: etl.ResponseText(rows)}
	digest := RequestDigest(req.Body)
	target := make([]etl.TargetRow, len(rows))
	for i, r := range rows {
		target[i] = etl.TargetRow{JobID: uuid.Nil, Data: r.Data, Normalized: r.Normalized}
	}
	var reused bool
	err = pg.WithTx(ctx, s.db, func(tx pgx.Tx) error {
		if req.IdempotencyKey != "" {
			existing, inserted, err := pg.ClaimLedgerEntry(ctx, tx, pg.LedgerEntry{
				PrincipalScopeHash: scope,
				IdempotencyKeyHash: SyncProcessKeyHash(scope, req.IdempotencyKey),
				RequestDigest:      digest,
				ResponseText:       res.ResponseText,
			})
			if err != nil {
				return err
			}
			if !inserted {
				if existing.RequestDigest != digest {
					reused = true
				} else {
					res = ProcessResult{ResponseText: existing.ResponseText, Replayed: true}
				}
				return errLedgerReplay // nothing to write: roll back
			}
		}
		return etl.LoadRows(ctx, tx, target)
	})
	switch {
	case errors.Is(err, errLedgerReplay) && reused:
		return ProcessResult{}, ErrIdempotencyKeyReused
	case errors.Is(err, errLedgerReplay):
		return res, nil
	case err != nil:
		return ProcessResult{}, storeError(err)
	}
	return res, nil
}
