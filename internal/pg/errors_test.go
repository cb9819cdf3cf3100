package pg_test

import (
	"context"
	"errors"
	"fmt"
	"io"
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

func TestIsTransient(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"40001 serialization_failure", pgError("40001", ""), true},
		{"40P01 deadlock_detected", pgError("40P01", ""), true},
		{"08006 connection_failure", pgError("08006", ""), true},
		{"08000 connection_exception", pgError("08000", ""), true},
		{"57P01 admin_shutdown", pgError("57P01", ""), true},
		{"57P03 cannot_connect_now", pgError("57P03", ""), true},
		{"53300 too_many_connections", pgError("53300", ""), true},
		{"53100 disk_full", pgError("53100", ""), true},
		{"57014 query_canceled", pgError("57014", ""), true},
		{"55P03 lock_not_available", pgError("55P03", ""), true},
		{"wrapped 40001", fmt.Errorf("finish: %w", pgError("40001", "")), true},
		{"wrapped ErrConnClosed", fmt.Errorf("finish: %w", pgconn.ErrConnClosed), true},
		{"text that merely mentions conn closed", errors.New("user data: conn closed"), false},
		{"23505 unique_violation", pgError("23505", "etl_job_submission_key_unique"), false},
		{"23514 check_violation", pgError("23514", "etl_job_status_check"), false},
		{"42601 syntax_error", pgError("42601", ""), false},
		{"42P01 undefined_table", pgError("42P01", ""), false},
		{"55006 object_in_use", pgError("55006", ""), false},
		{"wrapped 42601", fmt.Errorf("query: %w", pgError("42601", "")), false},
		{"context.Canceled", context.Canceled, false},
		{"wrapped context.Canceled", fmt.Errorf("claim jobs: %w", context.Canceled), false},
		{"context.DeadlineExceeded", context.DeadlineExceeded, true},
		{"io.EOF", io.EOF, true},
		{"io.ErrUnexpectedEOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{"plain error", errors.New("boom"), false},
		{"pg.ErrNotFound", pg.ErrNotFound, false},
		{"pgx.ErrNoRows", pgx.ErrNoRows, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := pg.IsTransient(c.err); got != c.want {
				t.Fatalf("IsTransient(%v) = %v, want %v", c.err, got, c.want)
			}
		})
	}
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
