package worker

import (
	"errors"
	"fmt"

	"github.com/mightyetl/mightyetl/internal/codes"
)

// Typed causes a handler's context is cancelled with; read them with
// context.Cause.
var (
	// ErrLeaseLost: a renewal or fenced write matched zero rows, or renewal
	// could not confirm the lease before the safety margin ran out.
	ErrLeaseLost = errors.New("lease lost")
	// ErrRevoked: a revocation for this job arrived and the renewal it
	// triggered found the lease gone (the job was cancelled, most often).
	ErrRevoked = errors.New("lease revoked")
	// ErrShutdown: the worker is stopping and the grace period ended.
	ErrShutdown = errors.New("worker shutting down")
	// ErrJobTimeout: the attempt ran past MaxJobDuration; the job fails
	// with etl_job_timeout.
	ErrJobTimeout = errors.New("job ran past its maximum duration")
)

// Error is a handler failure with a stable code. The codes the worker itself
// writes (contract.md "Worker failure codes") are codes.TargetUnavailable,
// codes.TargetFailure, codes.JobIntegrityFailure, codes.InternalError,
// codes.JobTimeout and codes.DiagnosticRequestedFailure. Transient failures are
// retried with backoff while attempts remain; the others fail the job at once.
type Error struct {
	Code      string
	Transient bool
	Err       error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %v", e.Code, e.Err)
	}
	return e.Code
}

func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same Code, so
// errors.Is(err, &worker.Error{Code: c}) matches any failure with code c
// (as jetstream.APIError matches by error code). Transient and Err are not
// compared.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t != nil && e.Code == t.Code
}

// Permanent returns a failure that fails the job at once with code.
func Permanent(code string, err error) error { return &Error{Code: code, Err: err} }

// Transient returns a failure that is retried while attempts remain and fails
// the job with etl_target_unavailable after the last attempt.
func Transient(err error) error {
	return &Error{Code: codes.TargetUnavailable, Transient: true, Err: err}
}
