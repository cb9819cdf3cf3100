package pg_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

func pgError(code, constraint string) error {
	return &pgconn.PgError{Code: code, ConstraintName: constraint, Message: "synthetic " + code}
}

// Every SQLSTATE class PostgreSQL defines, with its representative code,
// classified: the table is the one transient/permanent rule.
func TestErrorClassOfEverySQLStateClass(t *testing.T) {
	cases := []struct {
		code  string
		class string
	}{
		{"00000", pg.ClassDatabaseError}, // successful_completion (never an error in practice)
		{"01000", pg.ClassDatabaseError}, // warning
		{"02000", pg.ClassDatabaseError}, // no_data
		{"03000", pg.ClassDatabaseError}, // sql_statement_not_yet_complete
		{"08000", pg.ClassDatabaseUnavailable},
		{"08003", pg.ClassDatabaseUnavailable}, // connection_does_not_exist
		{"08006", pg.ClassDatabaseUnavailable}, // connection_failure
		{"08P01", pg.ClassDatabaseUnavailable}, // protocol_violation
		{"09000", pg.ClassDatabaseError},       // triggered_action_exception
		{"0A000", pg.ClassDatabaseError},       // feature_not_supported
		{"0B000", pg.ClassDatabaseError},       // invalid_transaction_initiation
		{"0F000", pg.ClassDatabaseError},       // locator_exception
		{"0L000", pg.ClassDatabaseError},       // invalid_grantor
		{"0P000", pg.ClassDatabaseError},       // invalid_role_specification
		{"0Z000", pg.ClassDatabaseError},       // diagnostics_exception
		{"20000", pg.ClassDatabaseError},       // case_not_found
		{"21000", pg.ClassDatabaseError},       // cardinality_violation
		{"22001", pg.ClassDatabaseError},       // string_data_right_truncation
		{"22P02", pg.ClassDatabaseError},       // invalid_text_representation
		{"23000", pg.ClassConstraintViolation}, // integrity_constraint_violation
		{"23502", pg.ClassConstraintViolation}, // not_null_violation
		{"23503", pg.ClassConstraintViolation}, // foreign_key_violation
		{"23505", pg.ClassConstraintViolation}, // unique_violation
		{"23514", pg.ClassConstraintViolation}, // check_violation
		{"23P01", pg.ClassConstraintViolation}, // exclusion_violation
		{"24000", pg.ClassDatabaseError},       // invalid_cursor_state
		{"25000", pg.ClassDatabaseError},       // invalid_transaction_state
		{"25P02", pg.ClassDatabaseError},       // in_failed_sql_transaction
		{"26000", pg.ClassDatabaseError},       // invalid_sql_statement_name
		{"27000", pg.ClassDatabaseError},       // triggered_data_change_violation
		{"28000", pg.ClassDatabaseError},       // invalid_authorization_specification
		{"28P01", pg.ClassDatabaseError},       // invalid_password (outside a connect)
		{"2B000", pg.ClassDatabaseError},       // dependent_privilege_descriptors_still_exist
		{"2D000", pg.ClassDatabaseError},       // invalid_transaction_termination
		{"2F000", pg.ClassDatabaseError},       // sql_routine_exception
		{"34000", pg.ClassDatabaseError},       // invalid_cursor_name
		{"38000", pg.ClassDatabaseError},       // external_routine_exception
		{"39000", pg.ClassDatabaseError},       // external_routine_invocation_exception
		{"3B000", pg.ClassDatabaseError},       // savepoint_exception
		{"3D000", pg.ClassDatabaseError},       // invalid_catalog_name (outside a connect)
		{"3F000", pg.ClassDatabaseError},       // invalid_schema_name
		{"40000", pg.ClassDatabaseError},       // transaction_rollback
		{"40001", pg.ClassConflict},            // serialization_failure
		{"40002", pg.ClassDatabaseError},       // transaction_integrity_constraint_violation
		{"40003", pg.ClassDatabaseError},       // statement_completion_unknown
		{"40P01", pg.ClassConflict},            // deadlock_detected
		{"42000", pg.ClassDatabaseError},       // syntax_error_or_access_rule_violation
		{"42501", pg.ClassDatabaseError},       // insufficient_privilege
		{"42601", pg.ClassDatabaseError},       // syntax_error
		{"42P01", pg.ClassSchemaMismatch},      // undefined_table
		{"42703", pg.ClassSchemaMismatch},      // undefined_column
		{"42883", pg.ClassSchemaMismatch},      // undefined_function
		{"42601", pg.ClassDatabaseError},       // syntax_error
		{"44000", pg.ClassDatabaseError},       // with_check_option_violation
		{"53000", pg.ClassDatabaseUnavailable}, // insufficient_resources
		{"53100", pg.ClassDatabaseUnavailable}, // disk_full
		{"53200", pg.ClassDatabaseUnavailable}, // out_of_memory
		{"53300", pg.ClassDatabaseUnavailable}, // too_many_connections
		{"54000", pg.ClassDatabaseError},       // program_limit_exceeded
		{"55000", pg.ClassDatabaseError},       // object_not_in_prerequisite_state
		{"55006", pg.ClassDatabaseError},       // object_in_use
		{"55P03", pg.ClassTimeout},             // lock_not_available (lock_timeout)
		{"57000", pg.ClassDatabaseError},       // operator_intervention
		{"57014", pg.ClassTimeout},             // query_canceled (statement_timeout)
		{"57P01", pg.ClassDatabaseUnavailable}, // admin_shutdown
		{"57P02", pg.ClassDatabaseUnavailable}, // crash_shutdown
		{"57P03", pg.ClassDatabaseUnavailable}, // cannot_connect_now
		{"58000", pg.ClassDatabaseError},       // system_error
		{"58030", pg.ClassDatabaseError},       // io_error
		{"72000", pg.ClassDatabaseError},       // snapshot_too_old
		{"F0000", pg.ClassDatabaseError},       // config_file_error
		{"HV000", pg.ClassDatabaseError},       // fdw_error
		{"P0001", pg.ClassDatabaseError},       // raise_exception
		{"XX000", pg.ClassDatabaseError},       // internal_error
	}
	transient := map[string]bool{pg.ClassTimeout: true, pg.ClassDatabaseUnavailable: true, pg.ClassConflict: true}
	for _, c := range cases {
		t.Run(c.code, func(t *testing.T) {
			for _, err := range []error{pgError(c.code, ""), fmt.Errorf("finish: %w", pgError(c.code, ""))} {
				if got := pg.ErrorClass(err); got != c.class {
					t.Errorf("ErrorClass(%v) = %q, want %q", err, got, c.class)
				}
				if got := pg.IsTransient(err); got != transient[c.class] {
					t.Errorf("IsTransient(%v) = %v, want %v", err, got, transient[c.class])
				}
			}
		})
	}
}

// Errors that are not server-reported: context, connection, sentinels and
// foreign errors, plain and wrapped.
func TestErrorClass(t *testing.T) {
	connectErr := connectError(t, pgError("28P01", ""))
	cases := []struct {
		name      string
		err       error
		class     string
		transient bool
	}{
		{"nil", nil, pg.ClassNone, false},
		{"context.Canceled", context.Canceled, pg.ClassCanceled, false},
		{"wrapped context.Canceled", fmt.Errorf("claim jobs: %w", context.Canceled), pg.ClassCanceled, false},
		{"context.DeadlineExceeded", context.DeadlineExceeded, pg.ClassTimeout, true},
		{"wrapped context.DeadlineExceeded", fmt.Errorf("renew: %w", context.DeadlineExceeded), pg.ClassTimeout, true},
		{"io.EOF", io.EOF, pg.ClassDatabaseUnavailable, true},
		{"io.ErrUnexpectedEOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), pg.ClassDatabaseUnavailable, true},
		{"net.ErrClosed", fmt.Errorf("write: %w", net.ErrClosed), pg.ClassDatabaseUnavailable, true},
		{"net.OpError", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("refused")}, pg.ClassDatabaseUnavailable, true},
		{"wrapped ErrConnClosed", fmt.Errorf("finish: %w", pgconn.ErrConnClosed), pg.ClassDatabaseUnavailable, true},
		{"connect error with an authentication failure", connectErr, pg.ClassDatabaseUnavailable, true},
		{"wrapped connect error", fmt.Errorf("acquire: %w", connectErr), pg.ClassDatabaseUnavailable, true},
		{"ErrConflictVanished", fmt.Errorf("insert jobs: %w", pg.ErrConflictVanished), pg.ClassConflict, true},
		{"pg.ErrNotFound", pg.ErrNotFound, pg.ClassNotFound, false},
		{"pgx.ErrNoRows", fmt.Errorf("read: %w", pgx.ErrNoRows), pg.ClassNotFound, false},
		{"text that merely mentions conn closed", errors.New("user data: conn closed"), pg.ClassOther, false},
		{"text that mentions a SQLSTATE", errors.New("ERROR: 40001"), pg.ClassOther, false},
		{"plain error", errors.New("boom"), pg.ClassOther, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := pg.ErrorClass(c.err); got != c.class {
				t.Errorf("ErrorClass(%v) = %q, want %q", c.err, got, c.class)
			}
			if got := pg.IsTransient(c.err); got != c.transient {
				t.Errorf("IsTransient(%v) = %v, want %v", c.err, got, c.transient)
			}
		})
	}
}

// connectError returns a real *pgconn.ConnectError wrapping cause, built by
// a connect that fails in the dialer before any network I/O.
func connectError(t *testing.T, cause error) error {
	t.Helper()
	cfg, err := pgconn.ParseConfig("postgres://u@127.0.0.1:1/db?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	cfg.DialFunc = func(context.Context, string, string) (net.Conn, error) { return nil, cause }
	_, err = pgconn.ConnectConfig(context.Background(), cfg)
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) || !errors.Is(err, cause) {
		t.Fatalf("connect: %T %v, want a *pgconn.ConnectError wrapping the cause", err, err)
	}
	return err
}

func TestIsUniqueViolation(t *testing.T) {
	uv := pgError("23505", "etl_job_submission_key_unique")
	cases := []struct {
		name       string
		err        error
		constraint string
		want       bool
	}{
		{"any constraint", uv, "", true},
		{"named constraint", uv, "etl_job_submission_key_unique", true},
		{"wrapped named constraint", fmt.Errorf("insert: %w", uv), "etl_job_submission_key_unique", true},
		{"other constraint", uv, "etl_job_records_pkey", false},
		{"check violation", pgError("23514", "etl_job_submission_key_unique"), "", false},
		{"serialization failure", pgError("40001", ""), "", false},
		{"plain error", errors.New("duplicate key value violates unique constraint"), "", false},
		{"nil", nil, "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := pg.IsUniqueViolation(c.err, c.constraint); got != c.want {
				t.Fatalf("IsUniqueViolation(%v, %q) = %v, want %v", c.err, c.constraint, got, c.want)
			}
		})
	}
}

// Real errors from a real server classify like the synthetic ones.
func TestErrorClassificationOfRealErrors(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ctx := context.Background()

	t.Run("syntax error", func(t *testing.T) {
		_, err := pool.Exec(ctx, `SELEKT 1`)
		if err == nil || pg.IsTransient(err) || pg.IsUniqueViolation(err, "") {
			t.Fatalf("syntax error %v classified transient or unique", err)
		}
	})
	t.Run("unique violation", func(t *testing.T) {
		row := baseJobRow("SUCCEEDED")
		if err := insertSQLRow(ctx, pool, "etl_job_records", row); err != nil {
			t.Fatal(err)
		}
		err := insertSQLRow(ctx, pool, "etl_job_records", row.with("job_record_id", uuid.New()))
		if !pg.IsUniqueViolation(err, "etl_job_submission_key_unique") || pg.IsTransient(err) {
			t.Fatalf("duplicate submission: %v", err)
		}
	})
	t.Run("statement timeout", func(t *testing.T) {
		p := pgtest.NewPool(t, url, 1)
		conn, err := p.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		if _, err := conn.Exec(ctx, `SET statement_timeout = 1`); err != nil {
			t.Fatal(err)
		}
		// pg_sleep here only provokes the server's timeout; nothing waits on it.
		_, err = conn.Exec(ctx, `SELECT pg_sleep(10)`)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "57014" || !pg.IsTransient(err) {
			t.Fatalf("statement timeout %v not transient 57014", err)
		}
	})
	t.Run("context canceled", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := pool.Exec(cctx, `SELECT 1`)
		if err == nil || pg.IsTransient(err) {
			t.Fatalf("cancelled statement %v classified transient", err)
		}
	})
	t.Run("connection refused", func(t *testing.T) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := pgx.Connect(cctx, "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=5")
		if err == nil || !pg.IsTransient(err) {
			t.Fatalf("refused connection %v not transient", err)
		}
	})
}
