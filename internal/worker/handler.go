package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"
	"unsafe"

	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/etl"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// Output is what a successful handler hands to the completer: the target
// rows. The worker writes them in the finish transaction only if the job's
// exact lease still holds. (A durable job writes no response-ledger row, so
// no response text is computed.)
type Output struct {
	Rows []etl.TargetRow
}

// Handler computes a job. It runs outside any transaction and must return
// promptly once ctx is done (context.Cause tells why). It returns an *Error
// (or any error, classified as internal) on failure.
type Handler func(ctx context.Context, c *lease.Claim) (Output, error)

// verifyDigest fails closed when the stored payload no longer matches the
// digest recorded at submission.
func verifyDigest(c *lease.Claim) error {
	// Hashed in place: the payload string's bytes are only read, and a
	// []byte copy of every payload was a twelfth of the worker's CPU.
	sum := sha256.Sum256(payloadView(c))
	var hexSum [2 * sha256.Size]byte
	hex.Encode(hexSum[:], sum[:])
	if string(hexSum[:]) != c.RequestDigest {
		return Permanent(codes.JobIntegrityFailure, errors.New("payload digest mismatch"))
	}
	return nil
}

// payloadView is c's payload as bytes without a copy, for readers only:
// the string's memory must never be written. The parsers of internal/etl
// only read their input (they slice it, never append to or write into it;
// TestHandlersLeaveThePayloadUnchanged), and a copy of every payload was a
// twentieth of the worker's CPU in the continuous bench (the allocation and
// the collector's assist it brought).
func payloadView(c *lease.Claim) []byte {
	return unsafe.Slice(unsafe.StringData(c.Payload), len(c.Payload))
}

func transform(c *lease.Claim, records []byte, maxRecords int) (Output, error) {
	rows, err := etl.Process(records, maxRecords)
	if err != nil {
		var ee *etl.Error
		if errors.As(err, &ee) {
			return Output{}, Permanent(ee.Code, err)
		}
		return Output{}, Permanent(codes.InternalError, err)
	}
	out := Output{Rows: make([]etl.TargetRow, len(rows))}
	for i, r := range rows {
		out.Rows[i] = etl.TargetRow{JobID: c.JobID, Data: r.Data, Normalized: r.Normalized}
	}
	return out, nil
}

// ETLHandler transforms an etl_records job's payload into processed_data rows.
func ETLHandler(maxRecords int) Handler {
	return func(ctx context.Context, c *lease.Claim) (Output, error) {
		if err := verifyDigest(c); err != nil {
			return Output{}, err
		}
		return transform(c, payloadView(c), maxRecords)
	}
}

// DiagnosticHandler waits durationMillis while honouring its context, then
// loads its records like an ETL job or fails as asked. Canary probes,
// benchmarks and fault tests use it.
func DiagnosticHandler(maxRecords int) Handler {
	return func(ctx context.Context, c *lease.Claim) (Output, error) {
		if err := verifyDigest(c); err != nil {
			return Output{}, err
		}
		// The same parser the intake validated the payload with.
		spec, err := etl.ParseDiagnostic(payloadView(c), maxRecords)
		if err != nil {
			code := codes.InvalidRecord
			var ee *etl.Error
			if errors.As(err, &ee) {
				code = ee.Code
			}
			return Output{}, Permanent(code, err)
		}
		if d := spec.Duration; d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return Output{}, context.Cause(ctx)
			}
		}
		switch spec.FailWith {
		case etl.FailWithTransient:
			return Output{}, Transient(errors.New("diagnostic transient failure"))
		case etl.FailWithPermanent:
			return Output{}, Permanent(codes.DiagnosticRequestedFailure, errors.New("diagnostic permanent failure"))
		}
		return transform(c, spec.Records, maxRecords)
	}
}

// DefaultHandlers maps every job kind to its handler.
func DefaultHandlers(maxRecords int) map[string]Handler {
	return map[string]Handler{
		pg.KindETLRecords: ETLHandler(maxRecords),
		pg.KindDiagnostic: DiagnosticHandler(maxRecords),
	}
}
