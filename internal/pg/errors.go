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

// IsTransient reports whether err is worth retrying: the database was
// unreachable, the connection broke, the server is shutting down or out of
// resources, the statement lost a serialization or deadlock race, or it ran
// past its statement or lock timeout.
// Constraint violations, syntax errors and context cancellation are not
// transient.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "40001", pgErr.Code == "40P01": // serialization_failure, deadlock_detected
			return true
		case pgErr.Code == "57014": // query_canceled (statement_timeout)
			return true
		case pgErr.Code == "55P03": // lock_not_available (lock_timeout)
			return true
		case strings.HasPrefix(pgErr.Code, "08"), // connection exception
			strings.HasPrefix(pgErr.Code, "53"),  // insufficient resources
			strings.HasPrefix(pgErr.Code, "57P"): // admin/crash shutdown, cannot connect now
			return true
		}
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return true
	}
	// A connection closed under a statement, or any other connection-level
	// pgconn error (they all carry SafeToRetry), means the path to the
	// database broke: transient. Matched by type, never by error text.
	var pgconnErr interface{ SafeToRetry() bool }
	return errors.Is(err, pgconn.ErrConnClosed) || errors.As(err, &pgconnErr)
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

// IsNoRows reports whether err is pgx.ErrNoRows.
func IsNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }
