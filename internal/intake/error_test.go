package intake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/etl"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// Every database failure maps to etl_target_unavailable exactly when
// pg.IsTransient says so or the caller gave up, and the batcher retries a
// flush only for a lost race (pg.ClassConflict).
func TestStoreErrorAndFlushRetryFollowPGClassification(t *testing.T) {
	pgErr := func(code string) error { return fmt.Errorf("insert jobs: %w", &pgconn.PgError{Code: code}) }
	cases := []struct {
		name  string
		err   error
		code  string
		retry bool
	}{
		{"serialization_failure", pgErr("40001"), codes.TargetUnavailable, true},
		{"deadlock_detected", pgErr("40P01"), codes.TargetUnavailable, true},
		{"conflicting row vanished", fmt.Errorf("insert jobs: %w", pg.ErrConflictVanished), codes.TargetUnavailable, true},
		{"connection_failure", pgErr("08006"), codes.TargetUnavailable, false},
		{"too_many_connections", pgErr("53300"), codes.TargetUnavailable, false},
		{"admin_shutdown", pgErr("57P01"), codes.TargetUnavailable, false},
		{"statement_timeout", pgErr("57014"), codes.TargetUnavailable, false},
		{"lock_timeout", pgErr("55P03"), codes.TargetUnavailable, false},
		{"connection closed", fmt.Errorf("insert jobs: %w", pgconn.ErrConnClosed), codes.TargetUnavailable, false},
		{"unexpected EOF", fmt.Errorf("insert jobs: %w", io.ErrUnexpectedEOF), codes.TargetUnavailable, false},
		{"deadline", fmt.Errorf("insert jobs: %w", context.DeadlineExceeded), codes.TargetUnavailable, false},
		{"caller cancelled", fmt.Errorf("insert jobs: %w", context.Canceled), codes.TargetUnavailable, false},
		{"unique_violation", pgErr("23505"), codes.InternalError, false},
		{"check_violation", pgErr("23514"), codes.InternalError, false},
		{"syntax_error", pgErr("42601"), codes.InternalError, false},
		{"undefined_column (schema moved)", pgErr("42703"), codes.SchemaIncompatible, false},
		{"undefined_table (schema moved)", pgErr("42P01"), codes.SchemaIncompatible, false},
		{"insufficient_privilege", pgErr("42501"), codes.InternalError, false},
		{"plain error", errors.New("boom"), codes.InternalError, false},
		{"use-case error passes through", ErrJobNotFound, codes.JobNotFound, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := CodeOf(storeError(c.err)); got != c.code {
				t.Errorf("storeError(%v) code %s, want %s", c.err, got, c.code)
			}
			if got := retryableFlush(c.err); got != c.retry {
				t.Errorf("retryableFlush(%v) = %v, want %v", c.err, got, c.retry)
			}
			if se := storeError(c.err); !errors.Is(se, c.err) {
				t.Errorf("storeError(%v) lost its cause", c.err)
			}
		})
	}
	if storeError(nil) != nil {
		t.Error("storeError(nil) is not nil")
	}
}

// RecordIndexOf answers the batch position of an etl_invalid_record
// rejection, from the use case's *Error or etl's own, wrapped or not, and
// nothing for any other code.
func TestRecordIndexOf(t *testing.T) {
	_, parseErr := etl.ParseBatch([]byte(`[{"id":"a"},{"id":"b"},{"id":" c"}]`), 10)
	cases := []struct {
		name  string
		err   error
		index int
		ok    bool
	}{
		{"etl rejection", parseErr, 2, true},
		{"use-case rejection", fromETL(parseErr), 2, true},
		{"wrapped", fmt.Errorf("submit: %w", fromETL(parseErr)), 2, true},
		{"first record", &Error{Code: codes.InvalidRecord, Index: 0}, 0, true},
		{"invalid JSON", fromETL(&etl.Error{Code: codes.InvalidJSON, Index: -1}), -1, false},
		{"other code", ErrJobNotFound, -1, false},
		{"plain error", errors.New("boom"), -1, false},
		{"nil", nil, -1, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if i, ok := RecordIndexOf(c.err); i != c.index || ok != c.ok {
				t.Errorf("RecordIndexOf = %d, %v; want %d, %v", i, ok, c.index, c.ok)
			}
		})
	}
}
