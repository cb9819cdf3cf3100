package pg_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

// runnerFS is a tiny migration set: 1 creates a table, 2 adds a column
// (ACCESS EXCLUSIVE on the table), 3 builds an index concurrently in a
// NO TRANSACTION file written re-runnable.
var runnerFS = fstest.MapFS{
	"00001_table.sql": {Data: []byte(`-- +goose Up
CREATE TABLE runner_t (id int PRIMARY KEY, v int NOT NULL DEFAULT 0);
INSERT INTO runner_t (id) SELECT g FROM generate_series(1, 10) g;
-- +goose Down
DROP TABLE runner_t;
`)},
	"00002_column.sql": {Data: []byte(`-- +goose Up
ALTER TABLE runner_t ADD COLUMN w int;
-- +goose Down
ALTER TABLE runner_t DROP COLUMN w;
`)},
	"00003_index.sql": {Data: []byte(`-- +goose NO TRANSACTION
-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS runner_t_v_idx;
CREATE INDEX CONCURRENTLY IF NOT EXISTS runner_t_v_idx ON runner_t (v);
-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS runner_t_v_idx;
`)},
}

// retryRecorder collects a Migrator's retries and signals the first.
type retryRecorder struct {
	mu      sync.Mutex
	retries []pg.MigrationRetry
	first   chan struct{}
}

func newRetryRecorder() *retryRecorder { return &retryRecorder{first: make(chan struct{})} }

func (r *retryRecorder) record(ev pg.MigrationRetry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.retries = append(r.retries, ev)
	if len(r.retries) == 1 {
		close(r.first)
	}
}

func (r *retryRecorder) all() []pg.MigrationRetry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]pg.MigrationRetry(nil), r.retries...)
}

// waitFirst blocks until the first retry or fails t after a generous
// deadline (a condition, not a duration under test).
func (r *retryRecorder) waitFirst(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case <-r.first:
	case err := <-done:
		t.Fatalf("migration ended before any retry: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("no retry within 2 minutes")
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's goroutine and the test's.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runnerDB returns a fresh empty database migrated to version 1 of
// runnerFS, and its URL.
func runnerDB(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	pool, url := pgtest.NewDatabase(t, pgtest.Options{Empty: true, MaxConns: 4})
	if err := (pg.Migrator{FS: runnerFS}).To(context.Background(), pool, 1); err != nil {
		t.Fatalf("migrate to 1: %v", err)
	}
	return pool, url
}

func runnerVersion(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var v int64
	err := pool.QueryRow(context.Background(),
		`SELECT coalesce(max(version_id), 0) FROM mightyetl_schema_migrations WHERE is_applied`).Scan(&v)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func columnExists(t *testing.T, pool *pgxpool.Pool, column string) bool {
	t.Helper()
	var ok bool
	err := pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM information_schema.columns
		WHERE table_name = 'runner_t' AND column_name = $1)`, column).Scan(&ok)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// holdLock begins a transaction on its own connection that takes lockSQL
// and keeps it until the returned release is called (also at cleanup).
func holdLock(t *testing.T, pool *pgxpool.Pool, lockSQL string) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, lockSQL); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if err := tx.Commit(ctx); err != nil {
				t.Errorf("release lock: %v", err)
			}
		})
	}
	t.Cleanup(release)
	return release
}

// A migration that times out on a lock is rolled back and retried alone
// until it gets the lock: here a transaction holds ACCESS SHARE on the
// table migration 2 alters; once the test has seen a retry it commits, and
// the run completes. Each retry logs version, attempt and SQLSTATE class,
// never SQL or error text.
func TestMigratorRetriesLockTimeout(t *testing.T) {
	t.Parallel()
	pool, _ := runnerDB(t)
	release := holdLock(t, pool, "LOCK TABLE runner_t IN ACCESS SHARE MODE")

	rec := newRetryRecorder()
	var logs syncBuffer
	m := pg.Migrator{FS: runnerFS, LockTimeout: 50 * time.Millisecond, RetryBase: 10 * time.Millisecond,
		RetryMax: 50 * time.Millisecond, OnRetry: rec.record, Log: slog.New(slog.NewJSONHandler(&logs, nil))}
	done := make(chan error, 1)
	go func() { done <- m.To(context.Background(), pool, 2) }()

	rec.waitFirst(t, done)
	if v := runnerVersion(t, pool); v != 1 {
		t.Fatalf("schema version %d while migration 2 is retrying, want 1", v)
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("migration after the lock was released: %v", err)
	}
	if v := runnerVersion(t, pool); v != 2 || !columnExists(t, pool, "w") {
		t.Fatalf("after the run: version %d, column w exists %v", v, columnExists(t, pool, "w"))
	}
	retries := rec.all()
	for i, r := range retries {
		if r.Version != 2 || !r.Up || r.SQLState != "55P03" || r.Attempt != i+1 {
			t.Errorf("retry %d: %+v", i, r)
		}
	}
	out := logs.String()
	if n := strings.Count(out, "\n"); n != len(retries) {
		t.Errorf("%d log lines for %d retries:\n%s", n, len(retries), out)
	}
	if !strings.Contains(out, `"version":2`) || !strings.Contains(out, `"sqlstate_class":"55"`) || !strings.Contains(out, `"attempt":1`) {
		t.Errorf("retry log lacks version, attempt or SQLSTATE class:\n%s", out)
	}
	for _, leak := range []string{"ALTER", "runner_t", "lock timeout"} {
		if strings.Contains(out, leak) {
			t.Errorf("retry log holds SQL or error text (%q):\n%s", leak, out)
		}
	}
}

// While a migration keeps failing on a lock, the fleet's reads of the table
// wait behind its lock request at most the runner's lock_timeout: a reader
// whose own lock_timeout is a few times the runner's never times out,
// however long the blocking transaction lasts. The control: the same ALTER
// without a lock_timeout makes that reader time out.
func TestMigratorNeverBlocksReadersPastLockTimeout(t *testing.T) {
	t.Parallel()
	pool, url := runnerDB(t)
	ctx := context.Background()
	const runnerTimeout, readerTimeout = 200 * time.Millisecond, 2 * time.Second
	reader, err := pg.NewPool(ctx, url, pg.PoolOptions{MaxConns: 1, LockTimeout: readerTimeout, ApplicationName: "runner-test-reader"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reader.Close)
	read := func() error {
		var n int
		return reader.QueryRow(ctx, "SELECT count(*) FROM runner_t").Scan(&n)
	}
	// queued waits until some session waits for a lock on runner_t.
	queued := func() {
		t.Helper()
		testwait.For(t, 2*time.Minute, "a lock request queued on runner_t", func() bool {
			var n int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE relation = 'runner_t'::regclass AND NOT granted`).Scan(&n)
			return err == nil && n > 0
		})
	}

	// Control: an ALTER with no lock_timeout queued behind the holder blocks
	// the reader past its own lock_timeout.
	release := holdLock(t, pool, "LOCK TABLE runner_t IN ACCESS SHARE MODE")
	alter, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	alterDone := make(chan error, 1)
	go func() {
		_, err := alter.Exec(ctx, "SET lock_timeout = 0; ALTER TABLE runner_t ADD COLUMN control int")
		alterDone <- err
	}()
	queued()
	var pgErr *pgconn.PgError
	if err := read(); !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("control: a read behind an ALTER without lock_timeout: %v, want SQLSTATE 55P03", err)
	}
	// Cancel the ALTER on the server (a client-side cancel could leave it
	// waiting there, to run once the lock is released).
	if _, err := pool.Exec(ctx, "SELECT pg_cancel_backend($1)", alter.Conn().PgConn().PID()); err != nil {
		t.Fatal(err)
	}
	if err := <-alterDone; !errors.As(err, &pgErr) || pgErr.Code != "57014" {
		t.Fatalf("control ALTER after pg_cancel_backend: %v, want SQLSTATE 57014", err)
	}
	alter.Release()
	release()

	// The runner: the same wait, retried under its lock_timeout.
	release = holdLock(t, pool, "LOCK TABLE runner_t IN ACCESS SHARE MODE")
	rec := newRetryRecorder()
	m := pg.Migrator{FS: runnerFS, LockTimeout: runnerTimeout, RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond,
		OnRetry: rec.record, Log: slog.New(slog.DiscardHandler)}
	done := make(chan error, 1)
	go func() { done <- m.To(ctx, pool, 2) }()
	rec.waitFirst(t, done)
	for i := range 5 {
		queued() // the runner's next attempt waits for the lock
		if err := read(); err != nil {
			t.Fatalf("read %d while the migration retries: %v", i, err)
		}
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("migration after the lock was released: %v", err)
	}
	if !columnExists(t, pool, "w") || columnExists(t, pool, "control") {
		t.Fatal("after the run: column w missing or the control column present")
	}
}

// When the lock stays held past the retry budget, the run fails with a
// LockRetryError naming the version and the attempts, and the migration is
// not applied.
func TestMigratorGivesUpAfterBudget(t *testing.T) {
	t.Parallel()
	pool, _ := runnerDB(t)
	holdLock(t, pool, "LOCK TABLE runner_t IN ACCESS SHARE MODE")
	rec := newRetryRecorder()
	m := pg.Migrator{FS: runnerFS, LockTimeout: 20 * time.Millisecond, LockRetryFor: 300 * time.Millisecond,
		RetryBase: 5 * time.Millisecond, RetryMax: 20 * time.Millisecond, OnRetry: rec.record, Log: slog.New(slog.DiscardHandler)}
	err := m.Up(context.Background(), pool)
	var lre *pg.LockRetryError
	if !errors.As(err, &lre) {
		t.Fatalf("Up with the lock held: %v, want a LockRetryError", err)
	}
	if lre.Version != 2 || !lre.Up || lre.SQLState != "55P03" || lre.Attempts != len(rec.all())+1 {
		t.Fatalf("LockRetryError %+v after %d retries", lre, len(rec.all()))
	}
	msg := err.Error()
	for _, want := range []string{"migration 00002 up", "attempts", "55P03", "-lock-retry-for"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	if v := runnerVersion(t, pool); v != 1 || columnExists(t, pool, "w") {
		t.Fatalf("after giving up: version %d, column w exists %v", v, columnExists(t, pool, "w"))
	}
}

// A NO TRANSACTION migration whose CREATE INDEX CONCURRENTLY times out
// waiting for an open writer leaves an INVALID index; the retry reruns the
// whole re-runnable file, which drops the leftover and builds a valid index.
func TestMigratorRetriesNoTransactionFile(t *testing.T) {
	t.Parallel()
	pool, _ := runnerDB(t)
	ctx := context.Background()
	if err := (pg.Migrator{FS: runnerFS}).To(ctx, pool, 2); err != nil {
		t.Fatal(err)
	}
	// An open writer: CREATE INDEX CONCURRENTLY creates the index, then
	// waits for this transaction and times out.
	release := holdLock(t, pool, "UPDATE runner_t SET v = v + 1 WHERE id = 1")
	rec := newRetryRecorder()
	m := pg.Migrator{FS: runnerFS, LockTimeout: 50 * time.Millisecond, RetryBase: 10 * time.Millisecond,
		RetryMax: 50 * time.Millisecond, OnRetry: rec.record, Log: slog.New(slog.DiscardHandler)}
	done := make(chan error, 1)
	go func() { done <- m.Up(ctx, pool) }()
	rec.waitFirst(t, done)
	var invalid bool
	err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = 'runner_t_v_idx'::regclass AND NOT indisvalid)`).Scan(&invalid)
	if err != nil || !invalid {
		t.Fatalf("after a failed attempt: invalid index left %v (%v), want true", invalid, err)
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("migration after the writer committed: %v", err)
	}
	var valid, indexes int
	err = pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE i.indisvalid), count(*) FROM pg_index i
		JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname LIKE 'runner_t_v_idx%'`).Scan(&valid, &indexes)
	if err != nil || valid != 1 || indexes != 1 || runnerVersion(t, pool) != 3 {
		t.Fatalf("after the run: %d valid of %d indexes (%v), version %d", valid, indexes, err, runnerVersion(t, pool))
	}
	for _, r := range rec.all() {
		if r.Version != 3 {
			t.Errorf("retry of version %d, want 3", r.Version)
		}
	}
}

// The runner's connections carry its lock_timeout; a session setting a NO
// TRANSACTION file changes does not leak into the next migration.
func TestMigratorSessionSettings(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t, pgtest.Options{Empty: true, MaxConns: 2})
	fsys := fstest.MapFS{
		"00001_seen.sql": {Data: []byte(`-- +goose Up
CREATE TABLE seen (version int PRIMARY KEY, lock_timeout text NOT NULL);
INSERT INTO seen VALUES (1, current_setting('lock_timeout'));
-- +goose Down
DROP TABLE seen;
`)},
		"00002_session_set.sql": {Data: []byte(`-- +goose NO TRANSACTION
-- +goose Up
SET lock_timeout = '7s';
INSERT INTO seen VALUES (2, current_setting('lock_timeout'));
-- +goose Down
DELETE FROM seen WHERE version = 2;
`)},
		"00003_after.sql": {Data: []byte(`-- +goose Up
INSERT INTO seen VALUES (3, current_setting('lock_timeout'));
-- +goose Down
DELETE FROM seen WHERE version = 3;
`)},
	}
	if err := (pg.Migrator{FS: fsys, LockTimeout: 1500 * time.Millisecond}).Up(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(context.Background(), "SELECT lock_timeout FROM seen ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "1500ms,7s,1500ms" {
		t.Fatalf("lock_timeout seen by migrations 1, 2, 3: %v, want 1500ms, 7s, 1500ms", got)
	}
}
