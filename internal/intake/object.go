package intake

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"time"

	"github.com/google/uuid"

	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/tracing"
)

// ObjectPartBytes is how many bytes of an object SubmitObject writes as one
// upload part (at most the upload's part limit): 64 MiB.
const ObjectPartBytes = 64 << 20

// ErrObjectNotFound is the rejection of an object submission whose object
// (or bucket) does not exist, or may not be read for the caller.
var ErrObjectNotFound = codeError(codes.UploadObjectNotFound)

// ObjectStream is an opened object: its bytes, read as they arrive (never
// whole in memory), with what its store says about it.
type ObjectStream struct {
	// Body is the object's bytes; the caller closes it.
	Body io.ReadCloser
	// Size is the object's size in bytes as stored, -1 when unknown.
	Size int64
	// SHA256 is the object's SHA-256 as the store recorded it (lowercase
	// hex), empty when unknown.
	SHA256 string
}

// ObjectSource opens the object of an object submission (a JetStream Object
// Store object for NATS requests: internal/natsbridge).
type ObjectSource interface {
	// Open starts reading the object. ErrObjectNotFound when it does not
	// exist (or may not be read for the caller); any other error is an
	// internal failure the caller may retry.
	Open(ctx context.Context) (ObjectStream, error)
}

// ObjectSubmission is a large job whose payload is an object read from a
// store: the same job as an upload submitted with the same key and digest.
type ObjectSubmission struct {
	// Principal is the submitter (non-blank).
	Principal string
	// IdempotencyKey is the normalised key (see ValidKey); required.
	IdempotencyKey string
	// Format is "jsonl" or "json_array".
	Format string
	// MaxBadRecords is the job's bad-record allowance (>= 0).
	MaxBadRecords int64
	// SHA256 is the SHA-256 of the whole object (lowercase hex) the
	// submitter declared.
	SHA256 string
	// Source opens the object.
	Source ObjectSource
	// PartBytes is how many bytes go into each upload part; zero means
	// ObjectPartBytes. Either is capped at the upload part limit
	// (UploadOptions.MaxPartBytes).
	PartBytes int64
	// KeepAlive, when not nil, is called every ObjectKeepAliveInterval
	// while the submission's last step runs (the stored payload read back
	// to verify its digest and count its records: minutes for a large
	// object, with no object bytes flowing meanwhile). The object's reader
	// reports its own progress.
	KeepAlive func()
}

// ObjectKeepAliveInterval is how often SubmitObject calls
// ObjectSubmission.KeepAlive during its submit step.
const ObjectKeepAliveInterval = 2 * time.Second

// SubmitObject creates the chunked job (pg.KindETLChunked) whose payload is
// the object req.Source opens: it streams the object into a new upload,
// ObjectPartBytes per part (PutPart), checks the whole SHA-256 against
// req.SHA256, and submits the upload (SubmitUpload), whose transaction
// creates the job. The job is committed when SubmitObject returns without
// error. Outcomes:
//   - the principal already has a job under the key: that job, Replayed,
//     when it is a chunked job of the same digest (the object is not read
//     again), and ErrSubmissionKeyReused otherwise;
//   - ErrObjectNotFound; ErrUploadTooLarge (the object, by its stored size
//     or as read, is beyond the upload limits); ErrUploadDigestMismatch (the
//     store's digest, or the bytes read, differ from req.SHA256); the
//     upload's own rejections (key, format, limits, quota): nothing is left
//     behind, the upload is aborted;
//   - an error from Source or the database: an internal failure to retry
//     (the upload is aborted when the database lets it).
//
// It holds at most one read buffer and the upload's write batch in memory.
func (s *Service) SubmitObject(ctx context.Context, req ObjectSubmission) (SubmitResult, error) {
	ctx, span := tracing.Start(ctx, "intake.submit_object")
	defer span.End()
	res, err := s.submitObject(ctx, req)
	outcome := metrics.SubmissionAccepted
	switch {
	case err != nil:
		outcome = metrics.SubmissionRejected
		s.countRejection(CodeOf(err))
		var ie *Error
		if errors.As(err, &ie) {
			tracing.Fail(span, ie.Code)
		}
	case res.Replayed:
		outcome = metrics.SubmissionReplayed
	}
	s.count(outcome)
	return res, err
}

func (s *Service) submitObject(ctx context.Context, req ObjectSubmission) (SubmitResult, error) {
	scope, err := s.scope(req.Principal)
	if err != nil {
		return SubmitResult{}, err
	}
	if !ValidKey(req.IdempotencyKey) {
		return SubmitResult{}, ErrInvalidIdempotencyKey
	}
	if !validDigest(req.SHA256) || req.MaxBadRecords < 0 || req.MaxBadRecords > s.uploads.MaxRecords ||
		(req.Format != pg.UploadFormatJSONL && req.Format != pg.UploadFormatJSONArray) {
		return SubmitResult{}, errInvalidUploadBody
	}
	keyHash := SubmissionKeyHash(scope, req.IdempotencyKey)
	// A redelivered or repeated request converges on its job without
	// reading the object again.
	if res, found, err := s.existingObjectJob(ctx, scope, keyHash, req.SHA256); found || err != nil {
		return res, err
	}
	// Over a quota now: refused before the object is read (the submit
	// after it decides for good).
	if err := s.precheckOwner(req.Principal, scope); err != nil {
		return SubmitResult{}, err
	}
	stream, err := req.Source.Open(ctx)
	if err != nil {
		return SubmitResult{}, err
	}
	defer stream.Body.Close()
	limits := s.uploads
	switch {
	case stream.Size > limits.MaxBytes:
		return SubmitResult{}, ErrUploadTooLarge
	case stream.SHA256 != "" && stream.SHA256 != req.SHA256:
		return SubmitResult{}, ErrUploadDigestMismatch
	}
	uploadID, err := s.objectCreateUpload(ctx, req.Principal, req.Format)
	if err != nil {
		return SubmitResult{}, err
	}
	submitted := false
	defer func() {
		if !submitted {
			s.abortObjectUpload(ctx, req.Principal, uploadID)
		}
	}()
	src := &objectReader{r: stream.Body, h: sha256.New(), limit: limits.MaxBytes}
	br := bufio.NewReaderSize(src, 64<<10)
	partBytes := min(cmp.Or(max(req.PartBytes, 0), ObjectPartBytes), limits.MaxPartBytes)
	part := 0
	for ; ; part++ {
		if _, err := br.Peek(1); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return SubmitResult{}, src.failure(err)
		}
		if err := s.objectPutPart(ctx, scope, uploadID, part+1, &io.LimitedReader{R: br, N: partBytes}); err != nil {
			return SubmitResult{}, src.failure(err)
		}
	}
	switch {
	case part == 0:
		return SubmitResult{}, ErrUploadIncomplete // an empty object: no payload
	case hex.EncodeToString(src.h.Sum(nil)) != req.SHA256:
		return SubmitResult{}, ErrUploadDigestMismatch
	}
	stop := keepAliveEvery(req.KeepAlive, ObjectKeepAliveInterval)
	res, err := s.objectSubmitUpload(ctx, uploadID, req)
	stop()
	if err != nil {
		return SubmitResult{}, err
	}
	submitted = !res.Replayed
	return res, nil
}

// existingObjectJob looks up the principal's job under keyHash: found with
// the job (Replayed) when it is a chunked job of digest, found with
// ErrSubmissionKeyReused when it is another request.
func (s *Service) existingObjectJob(ctx context.Context, scope, keyHash, digest string) (SubmitResult, bool, error) {
	j, err := pg.FindSubmittedJob(ctx, s.db, scope, keyHash)
	switch {
	case errors.Is(err, pg.ErrNotFound):
		return SubmitResult{}, false, nil
	case err != nil:
		return SubmitResult{}, true, storeError(err)
	case j.Kind != pg.KindETLChunked || j.RequestDigest != digest:
		return SubmitResult{}, true, ErrSubmissionKeyReused
	}
	return SubmitResult{Job: j, Replayed: true}, true, nil
}

// keepAliveEvery calls f every interval until the returned stop is called
// (stop waits for the last call); a nil f does nothing.
func keepAliveEvery(f func(), interval time.Duration) (stop func()) {
	if f == nil {
		return func() {}
	}
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				f()
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// abortObjectUpload removes an upload SubmitObject gave up on, also after
// ctx ended (bounded): no OPEN upload of a failed object submission stays
// behind unless the database is unreachable (then the maintainer prunes it
// when it expires).
func (s *Service) abortObjectUpload(ctx context.Context, principal string, uploadID uuid.UUID) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	_ = s.objectAbortUpload(actx, principal, uploadID)
}

// objectReader is an object's bytes as SubmitObject reads them: hashed as
// they pass, limited to limit bytes (one more is ErrUploadTooLarge), and
// with the source's own failure kept apart from the database's.
type objectReader struct {
	r     io.Reader
	h     hash.Hash
	n     int64
	limit int64
	err   error // the source's failure or the limit, if any
}

func (o *objectReader) Read(p []byte) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	n, err := o.r.Read(p)
	o.h.Write(p[:n])
	o.n += int64(n)
	if o.n > o.limit {
		o.err = ErrUploadTooLarge
		return n, o.err
	}
	if err != nil && !errors.Is(err, io.EOF) {
		o.err = err
	}
	return n, err
}

// failure is what a failed step returns: the source's own failure (a
// rejection such as ErrUploadDigestMismatch or ErrUploadTooLarge as is,
// anything else an internal error) when the source failed, else the step's
// error.
func (o *objectReader) failure(err error) error {
	if o.err != nil {
		return o.err
	}
	return err
}
