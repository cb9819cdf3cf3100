package intake

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/tracing"
)

// Defaults and bounds of UploadOptions (MIGHTYETL_UPLOAD_*; the
// configuration validates the ranges, New the cross rules).
const (
	// DefaultUploadMaxBytes bounds one upload's payload: 10 GiB.
	DefaultUploadMaxBytes = 10 << 30
	// DefaultUploadMaxRecords bounds one upload's records: 100,000,000.
	DefaultUploadMaxRecords = 100_000_000
	// DefaultUploadMaxPartBytes bounds one part (decompressed, and its
	// body as sent): 64 MiB.
	DefaultUploadMaxPartBytes = 64 << 20
	// DefaultUploadOwnerMaxStagedBytes bounds the bytes one owner's OPEN
	// uploads stage: 20 GiB.
	DefaultUploadOwnerMaxStagedBytes = 20 << 30
	// DefaultUploadExpiry is how long an upload stays OPEN after its
	// creation or its last committed part: 24 hours.
	DefaultUploadExpiry = 24 * time.Hour
)

// UploadOptions bound large-job uploads. Zero values take the defaults.
type UploadOptions struct {
	// MaxBytes bounds one upload's payload in bytes (decompressed)
	// (MIGHTYETL_UPLOAD_MAX_BYTES); zero means DefaultUploadMaxBytes.
	MaxBytes int64
	// MaxRecords bounds one upload's records, when they are counted at
	// submission (MIGHTYETL_UPLOAD_MAX_RECORDS); zero means
	// DefaultUploadMaxRecords.
	MaxRecords int64
	// MaxPartBytes bounds one part (MIGHTYETL_UPLOAD_MAX_PART_BYTES); zero
	// means DefaultUploadMaxPartBytes. At most MaxBytes.
	MaxPartBytes int64
	// OwnerMaxStagedBytes bounds the bytes one owner's OPEN uploads stage
	// (MIGHTYETL_UPLOAD_OWNER_MAX_STAGED_BYTES); zero means
	// DefaultUploadOwnerMaxStagedBytes. At least MaxPartBytes.
	OwnerMaxStagedBytes int64
	// Expiry is how long an upload stays OPEN after its creation or its
	// last committed part (MIGHTYETL_UPLOAD_EXPIRY); zero means
	// DefaultUploadExpiry.
	Expiry time.Duration
}

// WithDefaults returns o with every non-positive field set to its default.
func (o UploadOptions) WithDefaults() UploadOptions {
	o.MaxBytes = cmp.Or(max(o.MaxBytes, 0), DefaultUploadMaxBytes)
	o.MaxRecords = cmp.Or(max(o.MaxRecords, 0), DefaultUploadMaxRecords)
	o.MaxPartBytes = cmp.Or(max(o.MaxPartBytes, 0), DefaultUploadMaxPartBytes)
	o.OwnerMaxStagedBytes = cmp.Or(max(o.OwnerMaxStagedBytes, 0), DefaultUploadOwnerMaxStagedBytes)
	o.Expiry = cmp.Or(max(o.Expiry, 0), DefaultUploadExpiry)
	return o
}

// validate checks o after WithDefaults.
func (o UploadOptions) validate() error {
	if o.MaxPartBytes > o.MaxBytes {
		return fmt.Errorf("upload max part bytes %d above the upload max bytes %d", o.MaxPartBytes, o.MaxBytes)
	}
	if o.OwnerMaxStagedBytes < o.MaxPartBytes {
		return fmt.Errorf("upload owner max staged bytes %d below the max part bytes %d", o.OwnerMaxStagedBytes, o.MaxPartBytes)
	}
	return nil
}

// Upload use-case refusals.
var (
	ErrUploadNotFound           = codeError(codes.UploadNotFound)
	ErrUploadExpired            = codeError(codes.UploadExpired)
	ErrUploadDigestMismatch     = codeError(codes.UploadDigestMismatch)
	ErrUploadIncomplete         = codeError(codes.UploadIncomplete)
	ErrUploadAlreadySubmitted   = codeError(codes.UploadAlreadySubmitted)
	ErrUploadTooLarge           = codeError(codes.UploadTooLarge)
	ErrUploadOwnerQuotaExceeded = codeError(codes.UploadOwnerQuotaExceeded)
	ErrInvalidUploadPart        = codeError(codes.InvalidUploadPart)
	// errInvalidUploadBody: an upload's create or submit body holds a
	// value outside its domain (format, sha256, maxBadRecords).
	errInvalidUploadBody = codeError(codes.InvalidJSON)
)

// UploadLimits returns the effective upload bounds (the options after
// defaults).
func (s *Service) UploadLimits() UploadOptions { return s.uploads }

// uploadError maps the upload store's refusals to use-case errors.
func uploadError(err error) error {
	var be *pg.UploadBodyError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &be):
		// The client's body broke (a cut connection, a corrupt gzip
		// stream, a body beyond its limit): the cause stays reachable for
		// the transport.
		return &Error{Code: codes.InvalidUploadPart, Index: -1, cause: err}
	case errors.Is(err, pg.ErrNotFound):
		return ErrUploadNotFound
	case errors.Is(err, pg.ErrUploadExpired):
		return ErrUploadExpired
	case errors.Is(err, pg.ErrUploadSubmitted):
		return ErrUploadAlreadySubmitted
	case errors.Is(err, pg.ErrUploadIncomplete):
		return ErrUploadIncomplete
	case errors.Is(err, pg.ErrUploadDigestMismatch):
		return ErrUploadDigestMismatch
	case errors.Is(err, pg.ErrUploadTooLarge):
		return ErrUploadTooLarge
	case errors.Is(err, pg.ErrUploadOwnerQuota):
		return ErrUploadOwnerQuotaExceeded
	case errors.Is(err, pg.ErrUploadKeyReused):
		return ErrSubmissionKeyReused
	case errors.Is(err, pg.ErrReplaySourceNotFound):
		return ErrJobNotFound
	case errors.Is(err, pg.ErrReplayKeyReused), errors.Is(err, pg.ErrReplaySourceActive),
		errors.Is(err, pg.ErrReplaySourceSucceeded), errors.Is(err, pg.ErrReplayPayloadMismatch),
		errors.Is(err, pg.ErrReplayGenerationExhausted):
		return replayError(err)
	}
	return storeError(err)
}

// countUpload counts one upload operation's outcome.
func (s *Service) countUpload(operation string, err error, replayed bool) {
	if s.metrics == nil {
		return
	}
	outcome := metrics.UploadAccepted
	switch {
	case err != nil:
		outcome = metrics.UploadRejected
	case replayed:
		outcome = metrics.UploadReplayed
	}
	s.metrics.Uploads.WithLabelValues(operation, outcome).Inc()
}

// CreateUploadRequest opens an upload.
type CreateUploadRequest struct {
	Principal string
	// Format is pg.UploadFormatJSONL (also when empty) or
	// pg.UploadFormatJSONArray; anything else is etl_invalid_json.
	Format string
}

// CreateUpload opens a new upload of the caller, OPEN until it is submitted,
// aborted or expires (UploadOptions.Expiry after its creation or its last
// part).
func (s *Service) CreateUpload(ctx context.Context, req CreateUploadRequest) (pg.Upload, error) {
	u, err := s.createUpload(ctx, req)
	s.countUpload(metrics.UploadOpCreate, err, false)
	return u, err
}

func (s *Service) createUpload(ctx context.Context, req CreateUploadRequest) (pg.Upload, error) {
	scope, err := s.scope(req.Principal)
	if err != nil {
		return pg.Upload{}, err
	}
	format := cmp.Or(req.Format, pg.UploadFormatJSONL)
	if format != pg.UploadFormatJSONL && format != pg.UploadFormatJSONArray {
		return pg.Upload{}, errInvalidUploadBody
	}
	u, err := pg.CreateUpload(ctx, s.db, pg.NewUpload{PrincipalScopeHash: scope, Format: format, Expiry: s.uploads.Expiry})
	if err != nil {
		return pg.Upload{}, storeError(err)
	}
	return u, nil
}

// GetUpload returns the caller's upload with its committed parts: how a
// client resumes (it sends again the parts not listed, or listed with
// another digest). Absent and foreign uploads are ErrUploadNotFound; an
// OPEN upload past its expiry is ErrUploadExpired.
func (s *Service) GetUpload(ctx context.Context, principal string, uploadID uuid.UUID) (pg.Upload, error) {
	scope, err := s.scope(principal)
	if err != nil {
		return pg.Upload{}, err
	}
	u, err := pg.GetUpload(ctx, s.db, scope, uploadID)
	if err != nil {
		return pg.Upload{}, uploadError(err)
	}
	if u.Expired {
		return pg.Upload{}, ErrUploadExpired
	}
	return u, nil
}

// PutPartRequest stores one part.
type PutPartRequest struct {
	Principal string
	UploadID  uuid.UUID
	// PartNumber is 1..pg.MaxUploadPartNumber; anything else is
	// ErrInvalidUploadPart.
	PartNumber int64
	// SHA256 is the lowercase hex SHA-256 of the part's (decompressed)
	// bytes; anything but 64 lowercase hex characters is
	// ErrInvalidUploadPart.
	SHA256 string
	// Body yields the part's decompressed bytes. Its errors come back as
	// ErrInvalidUploadPart with the reader's error as the cause
	// (errors.Is/As reach it).
	Body io.Reader
}

// PutUploadPart stores one part of the caller's OPEN upload, replacing a
// part of the same number, streaming (never the whole part in memory; see
// pg.PutPart). Refusals: ErrInvalidUploadPart, ErrUploadNotFound,
// ErrUploadExpired, ErrUploadAlreadySubmitted, ErrUploadDigestMismatch,
// ErrUploadTooLarge (the part beyond MaxPartBytes or the upload beyond
// MaxBytes), ErrUploadOwnerQuotaExceeded; nothing of a refused part stays.
func (s *Service) PutUploadPart(ctx context.Context, req PutPartRequest) (pg.UploadPart, error) {
	ctx, span := tracing.Start(ctx, "intake.upload_part")
	defer span.End()
	part, err := s.putUploadPart(ctx, req)
	s.countUpload(metrics.UploadOpPart, err, false)
	var ie *Error
	if span.IsRecording() && errors.As(err, &ie) {
		tracing.Fail(span, ie.Code)
	}
	return part, err
}

func (s *Service) putUploadPart(ctx context.Context, req PutPartRequest) (pg.UploadPart, error) {
	scope, err := s.scope(req.Principal)
	if err != nil {
		return pg.UploadPart{}, err
	}
	if req.PartNumber < 1 || req.PartNumber > pg.MaxUploadPartNumber || !validDigest(req.SHA256) {
		return pg.UploadPart{}, ErrInvalidUploadPart
	}
	l := s.uploads
	part, err := pg.PutPart(ctx, s.db, pg.PutPartParams{
		PrincipalScopeHash: scope, UploadID: req.UploadID, PartNumber: req.PartNumber, SHA256: req.SHA256, Body: req.Body,
		MaxPartBytes: l.MaxPartBytes, MaxUploadBytes: l.MaxBytes, OwnerMaxStagedBytes: l.OwnerMaxStagedBytes, Expiry: l.Expiry,
	})
	if err != nil {
		return pg.UploadPart{}, uploadError(err)
	}
	return part, nil
}

// AbortUpload deletes the caller's OPEN upload (expired or not) and its
// parts; its stored bytes are deleted right after, in batches (what a
// failure leaves behind the maintainer prunes). ErrUploadNotFound,
// ErrUploadAlreadySubmitted.
func (s *Service) AbortUpload(ctx context.Context, principal string, uploadID uuid.UUID) error {
	err := s.abortUpload(ctx, principal, uploadID)
	s.countUpload(metrics.UploadOpAbort, err, false)
	return err
}

func (s *Service) abortUpload(ctx context.Context, principal string, uploadID uuid.UUID) error {
	scope, err := s.scope(principal)
	if err != nil {
		return err
	}
	if err := pg.AbortUpload(ctx, s.db, scope, uploadID); err != nil {
		return uploadError(err)
	}
	// The upload is gone for the caller; its chunks are garbage now.
	// Deleting them must not depend on the caller waiting.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	_, _ = pg.DeleteUploadChunks(dctx, s.db, uploadID, 0)
	return nil
}

// SubmitUploadRequest makes a job of an upload.
type SubmitUploadRequest struct {
	Principal string
	// IdempotencyKey is the normalised key (see ValidKey); required.
	IdempotencyKey string
	UploadID       uuid.UUID
	// SHA256 is the lowercase hex SHA-256 of the whole (decompressed)
	// payload; anything else is etl_invalid_json.
	SHA256 string
	// MaxBadRecords is how many bad records the job skips (and lists)
	// before one fails it; 0..UploadOptions.MaxRecords, else
	// etl_invalid_json.
	MaxBadRecords int64
	// ReplayOf, when not uuid.Nil, makes the job a replay of the caller's
	// FAILED or CANCELLED chunked job (the key is then a replay key).
	ReplayOf uuid.UUID
}

// SubmitUpload creates the chunked job of the caller's upload, its queue,
// load and outbox rows in one transaction after the whole payload's digest
// was verified from the stored bytes (pg.SubmitUpload), with submit's
// idempotency: the same key and digest give the same job (Replayed true),
// the same key with another digest ErrSubmissionKeyReused (with ReplayOf:
// the replay outcomes of Replay, ErrJobNotFound for an absent source).
// Upload refusals: ErrUploadNotFound, ErrUploadExpired,
// ErrUploadAlreadySubmitted, ErrUploadIncomplete, ErrUploadDigestMismatch,
// ErrUploadTooLarge. Over the caller's quota (a key without a job yet):
// ErrOwnerQuotaExceeded.
func (s *Service) SubmitUpload(ctx context.Context, req SubmitUploadRequest) (SubmitResult, error) {
	ctx, span := tracing.Start(ctx, "intake.submit_upload")
	defer span.End()
	res, err := s.submitUpload(ctx, req)
	s.countUpload(metrics.UploadOpSubmit, err, res.Replayed)
	outcome := metrics.SubmissionAccepted
	switch {
	case err != nil:
		outcome = metrics.SubmissionRejected
		s.countRejection(CodeOf(err))
	case res.Replayed:
		outcome = metrics.SubmissionReplayed
	}
	s.count(outcome)
	if span.IsRecording() {
		span.SetAttributes(tracing.AttrOutcome.String(outcome), tracing.AttrJobKind.String(pg.KindETLChunked))
		var ie *Error
		if errors.As(err, &ie) {
			tracing.Fail(span, ie.Code)
		}
	}
	return res, err
}

func (s *Service) submitUpload(ctx context.Context, req SubmitUploadRequest) (SubmitResult, error) {
	scope, err := s.scope(req.Principal)
	if err != nil {
		return SubmitResult{}, err
	}
	if !ValidKey(req.IdempotencyKey) {
		return SubmitResult{}, ErrInvalidIdempotencyKey
	}
	if !validDigest(req.SHA256) || req.MaxBadRecords < 0 || req.MaxBadRecords > s.uploads.MaxRecords {
		return SubmitResult{}, errInvalidUploadBody
	}
	keyHash := SubmissionKeyHash(scope, req.IdempotencyKey)
	if req.ReplayOf != uuid.Nil {
		keyHash = ReplayKeyHash(scope, req.IdempotencyKey)
	}
	adm, err := s.admitOwner(ctx, req.Principal, scope, keyHash)
	if err != nil {
		return SubmitResult{}, err
	}
	out, err := pg.SubmitUpload(ctx, s.db, pg.SubmitUploadParams{
		PrincipalScopeHash: scope, UploadID: req.UploadID, SubmissionKeyHash: keyHash, SHA256: req.SHA256,
		MaxBadRecords: req.MaxBadRecords, MaxAttempts: s.maxAttempts,
		MaxUploadBytes: s.uploads.MaxBytes, MaxRecords: s.uploads.MaxRecords, ReplayOf: req.ReplayOf,
		SubmitTraceparent: tracing.Traceparent(ctx),
	})
	adm.settle(err == nil && out.Created)
	if err != nil {
		return SubmitResult{}, uploadError(err)
	}
	if out.Created {
		// The job_available row does not notify at commit (migration
		// 00013): wake the relays.
		s.wakeOutbox()
	}
	// A large job takes the default priority (uploads carry no schedule).
	out.Job.Priority = cmp.Or(out.Job.Priority, pg.DefaultPriority)
	return SubmitResult{Job: out.Job, Replayed: !out.Created}, nil
}

// validDigest reports whether s is 64 lowercase hex characters.
func validDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// UploadView is the owner-visible representation of an upload. It never
// holds the owner, a part attempt id or a chunk.
type UploadView struct {
	UploadID     string           `json:"uploadId"`
	Format       string           `json:"format"`
	State        string           `json:"state"`
	StagedBytes  int64            `json:"stagedBytes"`
	ExpiresAt    string           `json:"expiresAt"`
	MaxPartBytes int64            `json:"maxPartBytes"`
	Parts        []UploadPartView `json:"parts"`
	JobID        string           `json:"jobId,omitempty"`
}

// UploadPartView is one committed part.
type UploadPartView struct {
	PartNumber int64  `json:"partNumber"`
	Bytes      int64  `json:"bytes"`
	SHA256     string `json:"sha256"`
}

// NewUploadView builds the representation of u under the service's part
// limit.
func (s *Service) NewUploadView(u pg.Upload) UploadView {
	v := UploadView{UploadID: u.UploadID.String(), Format: u.Format, State: u.State, StagedBytes: u.StagedBytes,
		ExpiresAt: FormatTime(u.ExpiresAt), MaxPartBytes: s.uploads.MaxPartBytes, Parts: make([]UploadPartView, len(u.Parts))}
	for i, p := range u.Parts {
		v.Parts[i] = NewUploadPartView(p)
	}
	if u.JobID != uuid.Nil {
		v.JobID = u.JobID.String()
	}
	return v
}

// NewUploadPartView builds the representation of p.
func NewUploadPartView(p pg.UploadPart) UploadPartView {
	return UploadPartView{PartNumber: p.Number, Bytes: p.Bytes, SHA256: p.SHA256}
}
