package intake

import (
	"errors"

	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/etl"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// Error is a use-case rejection with a stable Code: one of the problem codes
// of package codes (codes.InvalidJSON through codes.InternalError), the
// errorCode values of the HTTP contract, which transports map to their own
// representation. Index is the offending record for etl_invalid_record and -1
// otherwise. The cause, if any, is reachable with errors.Unwrap for
// classification but never part of Error(), which depends only on Code.
// errors.Is(err, ErrJobNotFound) and the like compare codes.
type Error struct {
	Code  string
	Index int
	cause error
}

// Error returns "intake: <code>".
func (e *Error) Error() string { return "intake: " + e.Code }

// Unwrap returns the cause (a database or context error), or nil.
func (e *Error) Unwrap() error { return e.cause }

// Is reports whether target is an *Error with the same Code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

func codeError(code string) *Error { return &Error{Code: code, Index: -1} }

// Sentinels for errors.Is.
var (
	ErrInvalidIdempotencyKey     = codeError(codes.InvalidIdempotencyKey)
	ErrPrincipalRequired         = codeError(codes.PrincipalRequired)
	ErrSubmissionKeyReused       = codeError(codes.SubmissionKeyReused)
	ErrIdempotencyKeyReused      = codeError(codes.IdempotencyKeyReused)
	ErrJobNotFound               = codeError(codes.JobNotFound)
	ErrCancellationKeyRequired   = codeError(codes.CancellationKeyRequired)
	ErrCancellationKeyReused     = codeError(codes.CancellationKeyReused)
	ErrAlreadySucceeded          = codeError(codes.AlreadySucceeded)
	ErrAlreadyFailed             = codeError(codes.AlreadyFailed)
	ErrInvalidPageLimit          = codeError(codes.InvalidPageLimit)
	ErrInvalidPageCursor         = codeError(codes.InvalidPageCursor)
	ErrInvalidStatusFilter       = codeError(codes.InvalidStatusFilter)
	ErrReplayKeyRequired         = codeError(codes.ReplayKeyRequired)
	ErrReplayKeyReused           = codeError(codes.ReplayKeyReused)
	ErrReplayPayloadMismatch     = codeError(codes.ReplayPayloadMismatch)
	ErrReplaySourceActive        = codeError(codes.ReplaySourceActive)
	ErrReplaySourceSucceeded     = codeError(codes.ReplaySourceSucceeded)
	ErrReplayGenerationExhausted = codeError(codes.ReplayGenerationExhausted)
	ErrReplayRequiresUpload      = codeError(codes.ReplayRequiresUpload)
	ErrInvalidPriority           = codeError(codes.InvalidPriority)
	ErrInvalidNotBefore          = codeError(codes.InvalidNotBefore)
	ErrInvalidPriorityFilter     = codeError(codes.InvalidPriorityFilter)
	ErrTargetUnavailable         = codeError(codes.TargetUnavailable)
	ErrInternal                  = codeError(codes.InternalError)
)

// fromETL converts an etl rejection to an *Error with the same code.
func fromETL(err error) error {
	var ee *etl.Error
	if errors.As(err, &ee) {
		return &Error{Code: ee.Code, Index: ee.Index}
	}
	return &Error{Code: codes.InternalError, Index: -1, cause: err}
}

// storeError classifies a database failure by pg.ErrorClass: a transient
// one (pg.IsTransient: unreachable, broken connection, timeout, a lost race
// or a conflicting row that vanished) or a caller that gave up is
// etl_target_unavailable (retry with the same key and body); a statement
// that names what the schema lacks (pg.ClassSchemaMismatch: the schema moved
// under this binary, as in a migration down while it serves, before its
// schema gate's next look) is etl_schema_incompatible, the gate's own
// answer (503, retry after Retry-After); anything else etl_internal_error.
// The cause is kept for errors.Is/As only.
func storeError(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	if pg.IsTransient(err) || pg.ErrorClass(err) == pg.ClassCanceled {
		return &Error{Code: codes.TargetUnavailable, Index: -1, cause: err}
	}
	if pg.ErrorClass(err) == pg.ClassSchemaMismatch {
		return &Error{Code: codes.SchemaIncompatible, Index: -1, cause: err}
	}
	return &Error{Code: codes.InternalError, Index: -1, cause: err}
}

// RecordIndexOf returns the zero-based position in the batch of the record
// an etl_invalid_record rejection (an *Error or *etl.Error) is about, and
// false for any other error. It is a position only, never the record's
// content or id, so a transport may show it to the caller.
func RecordIndexOf(err error) (int, bool) {
	code, index := "", -1
	var e *Error
	var ee *etl.Error
	switch {
	case errors.As(err, &e):
		code, index = e.Code, e.Index
	case errors.As(err, &ee):
		code, index = ee.Code, ee.Index
	}
	if code != codes.InvalidRecord || index < 0 {
		return -1, false
	}
	return index, true
}

// CodeOf returns the stable code of err: its *Error or *etl.Error code, or
// etl_internal_error for anything else (nil gives "").
func CodeOf(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	var ee *etl.Error
	if errors.As(err, &ee) {
		return ee.Code
	}
	return codes.InternalError
}
