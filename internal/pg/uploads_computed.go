package pg

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// PutPartComputed stores one part exactly as PutPart does (the same checks,
// batches, chunks, final transaction and refusals), for a caller that
// cannot know a part's digest before it sends it: it ignores p.SHA256 and
// returns the part's SHA-256 as computed while streaming, so it never
// refuses with ErrUploadDigestMismatch. The caller must verify the whole
// payload's digest itself before it submits (SubmitUpload verifies it
// again from the stored bytes): intake.SubmitObject, which streams an
// Object Store object whose declared digest covers the whole object only.
func PutPartComputed(ctx context.Context, db UploadDB, p PutPartParams) (UploadPart, error) {
	if p.PartNumber < 1 || p.PartNumber > MaxUploadPartNumber {
		return UploadPart{}, fmt.Errorf("put part: part number %d outside 1..%d", p.PartNumber, MaxUploadPartNumber)
	}
	var state string
	var expired bool
	var uploadOthers, ownerOthers int64
	err := db.QueryRow(ctx, putPartCheckSQL, p.UploadID, p.PrincipalScopeHash, p.PartNumber).
		Scan(&state, &expired, &uploadOthers, &ownerOthers)
	switch {
	case IsNoRows(err):
		return UploadPart{}, ErrNotFound
	case err != nil:
		return UploadPart{}, fmt.Errorf("put part: check upload: %w", err)
	case state != UploadOpen:
		return UploadPart{}, ErrUploadSubmitted
	case expired:
		return UploadPart{}, ErrUploadExpired
	}
	limitErr := func(n int64) error {
		if n > p.MaxPartBytes || uploadOthers+n > p.MaxUploadBytes {
			return ErrUploadTooLarge
		}
		return ErrUploadOwnerQuota
	}
	allowed := min(p.MaxPartBytes, p.MaxUploadBytes-uploadOthers, p.OwnerMaxStagedBytes-ownerOthers-uploadOthers)
	if allowed < 0 {
		return UploadPart{}, limitErr(0)
	}
	attempt, err := uuid.NewV7()
	if err != nil {
		return UploadPart{}, fmt.Errorf("put part: attempt id: %w", err)
	}
	written := false
	cleanup := func() {
		if written {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_, _ = db.Exec(cctx, deleteAttemptSQL, p.UploadID, attempt)
		}
	}
	h := sha256.New()
	buf := make([]byte, min(UploadBatchBytes, allowed+1))
	var total, chunks int64
	for {
		// At most one batch in memory; never one byte beyond the allowance.
		n, rerr := io.ReadFull(p.Body, buf[:min(int64(len(buf)), allowed+1-total)])
		if n > 0 {
			total += int64(n)
			if total > allowed {
				cleanup()
				return UploadPart{}, limitErr(total)
			}
			h.Write(buf[:n])
			rows := make([][]any, 0, (n+MaxUploadChunkBytes-1)/MaxUploadChunkBytes)
			for off := 0; off < n; off += MaxUploadChunkBytes {
				rows = append(rows, []any{[16]byte(p.UploadID), [16]byte(attempt), chunks, buf[off:min(off+MaxUploadChunkBytes, n)]})
				chunks++
			}
			written = true
			// One COPY on the pool: its own short transaction.
			if _, err := db.CopyFrom(ctx, pgx.Identifier{"etl_upload_chunks"},
				[]string{"upload_id", "part_attempt_id", "chunk_index", "chunk_data"}, pgx.CopyFromRows(rows)); err != nil {
				cleanup()
				return UploadPart{}, fmt.Errorf("put part: copy chunks: %w", err)
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			cleanup()
			return UploadPart{}, &UploadBodyError{Err: rerr}
		}
	}
	sum := h.Sum(nil)
	part := UploadPart{Number: p.PartNumber, Bytes: total, SHA256: hex.EncodeToString(sum)}
	if err := withReadCommittedTx(ctx, db, func(tx pgx.Tx) error {
		return commitPart(ctx, tx, p, part, sum, attempt, chunks)
	}); err != nil {
		cleanup()
		return UploadPart{}, err
	}
	return part, nil
}
