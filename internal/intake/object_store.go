package intake

import (
	"context"
	"errors"
	"io"

	"github.com/google/uuid"

	"github.com/mightyetl/mightyetl/internal/pg"
)

// The upload steps of SubmitObject: the upload use cases' own
// (createUpload, submitUpload, abortUpload, uploadError, the service's
// UploadOptions), except that a part's digest is computed while it streams
// (pg.PutPart without a declared digest), not declared before.

// objectCreateUpload creates the OPEN upload an object is streamed into.
func (s *Service) objectCreateUpload(ctx context.Context, principal, format string) (uuid.UUID, error) {
	u, err := s.createUpload(ctx, CreateUploadRequest{Principal: principal, Format: format})
	if err != nil {
		return uuid.Nil, err
	}
	return u.UploadID, nil
}

// objectPutPart stores part number part of the upload from body; the part's
// digest is computed (the object's whole digest is checked after the last
// part).
func (s *Service) objectPutPart(ctx context.Context, scope string, uploadID uuid.UUID, part int, body io.Reader) error {
	l := s.uploads
	// No SHA256: PutPart computes the part's digest and refuses none.
	_, err := pg.PutPart(ctx, s.db, pg.PutPartParams{
		PrincipalScopeHash: scope, UploadID: uploadID, PartNumber: int64(part), Body: body,
		MaxPartBytes: l.MaxPartBytes, MaxUploadBytes: l.MaxBytes, OwnerMaxStagedBytes: l.OwnerMaxStagedBytes,
		Expiry: l.Expiry,
	})
	return objectUploadError(err)
}

// objectSubmitUpload submits the upload as the chunked job (submitUpload:
// the whole digest verified again from the stored bytes, then one
// transaction). The upload is SUBMITTED when the result is not Replayed; a
// replayed result means an earlier submission under the key made the job,
// and this upload stays OPEN for the caller to abort.
func (s *Service) objectSubmitUpload(ctx context.Context, uploadID uuid.UUID, req ObjectSubmission) (SubmitResult, error) {
	res, err := s.submitUpload(ctx, SubmitUploadRequest{
		Principal: req.Principal, IdempotencyKey: req.IdempotencyKey, UploadID: uploadID,
		SHA256: req.SHA256, MaxBadRecords: req.MaxBadRecords,
	})
	return res, objectUploadError(err)
}

// objectAbortUpload deletes an upload SubmitObject gave up on, with its
// chunks.
func (s *Service) objectAbortUpload(ctx context.Context, principal string, uploadID uuid.UUID) error {
	return s.abortUpload(ctx, principal, uploadID)
}

// objectUploadError is uploadError for the upload SubmitObject itself
// created moments before: a body failure is the object reader's (SubmitObject
// reports the reader's own error), and the refusals about the upload's
// state (absent, expired, submitted, incomplete) cannot be the submitter's
// doing: they are internal errors.
func objectUploadError(err error) error {
	var be *pg.UploadBodyError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &be):
		return err
	case errors.Is(err, pg.ErrNotFound), errors.Is(err, pg.ErrUploadExpired),
		errors.Is(err, pg.ErrUploadSubmitted), errors.Is(err, pg.ErrUploadIncomplete),
		errors.Is(err, ErrUploadNotFound), errors.Is(err, ErrUploadExpired),
		errors.Is(err, ErrUploadAlreadySubmitted), errors.Is(err, ErrUploadIncomplete):
		return &Error{Code: ErrInternal.Code, Index: -1, cause: err}
	}
	return uploadError(err)
}
