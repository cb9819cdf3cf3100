package pg

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotFound reports that a looked-up row does not exist (or is not visible to
// the caller's scope). Stores return it instead of pgx.ErrNoRows.
var ErrNotFound = errors.New("not found")

// ErrConflictVanished reports that a row an insert conflicted with was
// deleted (pruned) before the statement that reads it: nothing is wrong
// with the request, and the same call with the same arguments may be made
// again. It is not ErrNotFound: callers must never answer it as an absent
// resource.
var ErrConflictVanished = errors.New("conflicting row vanished")

// Error classes: one fixed, payload-free word per kind of failure, for log
// attributes and metric labels (never error text, SQL or values). ErrorClass
// returns exactly one of them.
const (
	// ClassNone is the class of a nil error.
	ClassNone = "none"
	// ClassCanceled: the caller's context was cancelled (not transient:
	// the caller gave up).
	ClassCanceled = "canceled"
	// ClassTimeout: a deadline ran out, the caller's or the server's
	// (statement_timeout 57014, lock_timeout 55P03). Transient.
	ClassTimeout = "timeout"
	// ClassDatabaseUnavailable: the database could not be reached, the
	// connection broke, or the server is shutting down or out of resources
	// (SQLSTATE classes 08, 53, 57P). Transient.
	ClassDatabaseUnavailable = "database_unavailable"
	// ClassConflict: the statement lost a race with a concurrent transaction
	// (serialization_failure 40001, deadlock_detected 40P01) or a row it
	// conflicted with vanished (ErrConflictVanished). Transient: the same
	// call with the same arguments may be made again.
	ClassConflict = "conflict"
	// ClassConstraintViolation: the server refused a row (SQLSTATE class
	// 23: unique, check, foreign key, not null, exclusion). Permanent.
	ClassConstraintViolation = "constraint_violation"
	// ClassNotFound: ErrNotFound or pgx.ErrNoRows. Permanent.
	ClassNotFound = "not_found"
	// ClassDatabaseError: any other error the server reported (syntax,
	// privileges, data, internal). Permanent.
	ClassDatabaseError = "database_error"
	// ClassSchemaMismatch: the statement names a column, table or function
	// the database's schema does not have (SQLSTATE 42703, 42P01, 42883):
	// the schema moved under a running binary (a migration down, or up past
	// what it knows); its schema gate will say so at its next check.
	// Callers answer it as the gate would (503 etl_schema_incompatible).
	ClassSchemaMismatch = "schema_mismatch"
	// ClassOther: an error that did not come from the database (a
	// publisher's, a handler's). Permanent as far as this package knows.
	ClassOther = "other"
)

// ErrorClass returns the class of err (one of the Class* constants),
// looking through wrapping. It is the only place that reads SQLSTATE codes
// for classification; IsTransient is defined by it. It depends only on the
// error's type, code and wrapped sentinels, never on its text.
func ErrorClass(err error) string {
	if err == nil {
		return ClassNone
	}
	if errors.Is(err, context.Canceled) {
		return ClassCanceled
	}
	if errors.Is(err, ErrConflictVanished) {
		return ClassConflict
	}
	if errors.Is(err, ErrNotFound) || errors.Is(err, pgx.ErrNoRows) {
		return ClassNotFound
	}
	// Any failure to connect means the database is unavailable to us,
	// whatever the server said (not accepting connections, too many
	// clients, authentication refused during a credential rotation, ...).
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return ClassDatabaseUnavailable
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return sqlStateClass(pgErr.Code)
	}
	if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return ClassTimeout
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return ClassDatabaseUnavailable
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return ClassDatabaseUnavailable
	}
	// A connection closed under a statement, or any other connection-level
	// pgconn error (they all carry SafeToRetry), means the path to the
	// database broke. Matched by type, never by error text.
	var pgconnErr interface{ SafeToRetry() bool }
	if pgconn.SafeToRetry(err) || errors.Is(err, pgconn.ErrConnClosed) || errors.As(err, &pgconnErr) {
		return ClassDatabaseUnavailable
	}
	return ClassOther
}

// sqlStateClass classifies a server-reported SQLSTATE code.
func sqlStateClass(code string) string {
	switch {
	case code == "40001", code == "40P01": // serialization_failure, deadlock_detected
		return ClassConflict
	case code == "57014", code == "55P03": // query_canceled (statement_timeout), lock_not_available (lock_timeout)
		return ClassTimeout
	case strings.HasPrefix(code, "08"), // connection exception
		strings.HasPrefix(code, "53"),  // insufficient resources
		strings.HasPrefix(code, "57P"): // admin/crash shutdown, cannot connect now
		return ClassDatabaseUnavailable
	case strings.HasPrefix(code, "23"): // integrity constraint violation
		return ClassConstraintViolation
	case code == "42703", code == "42P01", code == "42883": // undefined column, table, function
		return ClassSchemaMismatch
	default:
		return ClassDatabaseError
	}
}

// IsTransient reports whether err is worth retrying: the database was
// unreachable, the connection broke, the server is shutting down or out of
// resources, the statement lost a serialization or deadlock race or a
// conflicting row vanished, or it ran past a deadline, its statement
// timeout or its lock timeout (ErrorClass timeout, database_unavailable or
// conflict). Constraint violations, syntax errors, absent rows and context
// cancellation are not transient.
func IsTransient(err error) bool {
	switch ErrorClass(err) {
	case ClassTimeout, ClassDatabaseUnavailable, ClassConflict:
		return true
	}
	return false
}

// IsUniqueViolation reports whether err is a unique_violation (23505),
// optionally of the named constraint (empty matches any).
func IsUniqueViolation(err error, constraint string) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		return false
	}
	return constraint == "" || pgErr.ConstraintName == constraint
}

// isForeignKeyViolation reports whether err is a foreign_key_violation (23503).
func isForeignKeyViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23503"
}

// IsNoRows reports whether err is pgx.ErrNoRows.
func IsNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }
