package pg

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/client/backoff"
	"github.com/mightyetl/mightyetl/migrations"
	"github.com/pressly/goose/v3"
)

// The migration runner's defaults (docs/operations/upgrades.md, "Running
// migrations").
const (
	// DefaultMigrateLockTimeout is the lock_timeout every statement of a
	// migration runs under unless its file sets its own: the longest a
	// statement of the fleet queues behind a migration that waits for a
	// lock.
	DefaultMigrateLockTimeout = time.Second
	// DefaultMigrateLockRetryFor is how long one migration keeps retrying
	// after lock timeouts before the run gives up.
	DefaultMigrateLockRetryFor = 10 * time.Minute
	// DefaultMigrateRetryBase and DefaultMigrateRetryMax bound the pause
	// between two attempts of a migration: the bound doubles from base up to
	// max, and the pause is drawn from its upper half (at least half the
	// bound, so the fleet runs undisturbed between two attempts).
	DefaultMigrateRetryBase = 250 * time.Millisecond
	DefaultMigrateRetryMax  = 10 * time.Second
)

// Migrator applies and rolls back migrations so that a migration waits for
// the fleet, never the fleet for the migration:
//
//   - every statement runs under a short lock_timeout: the runner's
//     connections carry LockTimeout as their session default (a file's own
//     SET LOCAL lock_timeout wins inside its transaction), so a statement
//     of the fleet queues behind a migration's lock request at most that
//     long;
//   - migrations run one at a time, each under goose's advisory lock, each
//     in its own transaction unless its file says `-- +goose NO
//     TRANSACTION`; goose records a version only when its migration
//     succeeded;
//   - a migration that fails with SQLSTATE 55P03 (lock_not_available) or
//     40P01 (deadlock_detected) was rolled back and is retried, alone, after
//     a capped, jittered pause, until LockRetryFor has passed since its
//     first failure (it is retried at least once); then the run fails with a *LockRetryError naming the
//     version and the number of attempts. Each retry logs one line: version,
//     direction, attempt and SQLSTATE class, never SQL or error text.
//
// A `NO TRANSACTION` file is rerun from its first statement, so it must be
// re-runnable: an interrupted CREATE INDEX CONCURRENTLY leaves an INVALID
// index behind, which the file drops first (DROP INDEX CONCURRENTLY IF
// EXISTS when invalid) before CREATE INDEX CONCURRENTLY IF NOT EXISTS
// (docs/operations/upgrades.md). Each migration gets a fresh connection,
// so session settings a file changes (SET lock_timeout outside a
// transaction) end with it.
//
// The zero Migrator uses the embedded migrations and the defaults above.
type Migrator struct {
	// LockTimeout is the session lock_timeout of the runner's connections;
	// zero means DefaultMigrateLockTimeout.
	LockTimeout time.Duration
	// LockRetryFor bounds how long one migration is retried after lock
	// timeouts, from its first failure (at least one retry); zero means
	// DefaultMigrateLockRetryFor.
	LockRetryFor time.Duration
	// RetryBase and RetryMax shape the pause between attempts (see
	// DefaultMigrateRetryBase); zero means the defaults.
	RetryBase, RetryMax time.Duration
	// FS holds the migration files; nil means the embedded migrations.
	FS fs.FS
	// Log receives one line per retry; nil means slog.Default().
	Log *slog.Logger
	// OnRetry, when set, is called after a lock failure and before the
	// pause (tests synchronise on it).
	OnRetry func(MigrationRetry)
}

// MigrationRetry describes one failed attempt that will be retried.
type MigrationRetry struct {
	Version  int64
	Up       bool
	Attempt  int    // the attempt that failed, from 1
	SQLState string // 55P03 or 40P01
	Pause    time.Duration
}

// LockRetryError reports a migration that kept failing on locks until its
// retry budget ran out.
type LockRetryError struct {
	Version  int64
	Up       bool
	Attempts int
	Budget   time.Duration
	SQLState string // of the last attempt
}

func (e *LockRetryError) Error() string {
	return fmt.Sprintf("migration %05d %s: gave up after %d attempts: each timed out waiting for a lock other sessions hold (SQLSTATE %s) and -lock-retry-for %s is spent; the migration is not applied: run it again when the fleet is quieter, or allow longer",
		e.Version, direction(e.Up), e.Attempts, e.SQLState, e.Budget)
}

func direction(up bool) string {
	if up {
		return "up"
	}
	return "down"
}

func (m Migrator) lockTimeout() time.Duration {
	if m.LockTimeout > 0 {
		return m.LockTimeout
	}
	return DefaultMigrateLockTimeout
}

func (m Migrator) fsys() fs.FS {
	if m.FS != nil {
		return m.FS
	}
	return migrations.FS
}

func (m Migrator) log() *slog.Logger {
	if m.Log != nil {
		return m.Log
	}
	return slog.Default()
}

// open returns a goose provider on a pool of its own (the caller's settings,
// at most two connections, the runner's lock_timeout); the caller calls the
// returned close.
func (m Migrator) open(ctx context.Context, pool *pgxpool.Pool) (*goose.Provider, func(), error) {
	cfg := pool.Config()
	cfg.MaxConns = 2
	cfg.MinConns = 0
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = fmt.Sprint(max(m.lockTimeout().Milliseconds(), 1))
	// A connection serves one goose call (a status read or one migration)
	// and is closed after it, so nothing a migration left in its session
	// (a SET outside a transaction, a temporary table) reaches the next.
	cfg.AfterRelease = func(*pgx.Conn) bool { return false }
	own, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("migration pool: %w", err)
	}
	p, db, err := newProvider(own, m.fsys())
	if err != nil {
		own.Close()
		return nil, nil, err
	}
	return p, func() { _ = db.Close(); own.Close() }, nil
}

// Up applies every pending migration.
func (m Migrator) Up(ctx context.Context, pool *pgxpool.Pool) error {
	return m.upTo(ctx, pool, -1)
}

// To migrates up or down to version exactly (0: every migration rolled
// back).
func (m Migrator) To(ctx context.Context, pool *pgxpool.Pool, version int64) error {
	if version < 0 {
		return fmt.Errorf("migrate to %d: not a schema version", version)
	}
	p, closeFn, err := m.open(ctx, pool)
	if err != nil {
		return err
	}
	cur, err := p.GetDBVersion(ctx)
	closeFn()
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if version >= cur {
		return m.upTo(ctx, pool, version)
	}
	return m.downTo(ctx, pool, version, false)
}

// Down rolls back the newest applied migration; it fails when none is
// applied.
func (m Migrator) Down(ctx context.Context, pool *pgxpool.Pool) error {
	return m.downTo(ctx, pool, 0, true)
}

// upTo applies the pending migrations up to target (-1: all), one at a
// time, oldest first.
func (m Migrator) upTo(ctx context.Context, pool *pgxpool.Pool, target int64) error {
	p, closeFn, err := m.open(ctx, pool)
	if err != nil {
		return err
	}
	defer closeFn()
	st, err := p.Status(ctx)
	if err != nil {
		return fmt.Errorf("migrate up: %w", err)
	}
	var applied int64
	var pending []int64
	for _, s := range st {
		if s.State == goose.StateApplied {
			applied = max(applied, s.Source.Version)
		} else if target < 0 || s.Source.Version <= target {
			pending = append(pending, s.Source.Version)
		}
	}
	for _, v := range pending {
		if v < applied {
			// goose's own rule: a migration older than the applied version
			// was skipped (a branch merged late); applying it out of order
			// would be a surprise.
			return fmt.Errorf("migrate up: migration %05d is pending below the applied version %d", v, applied)
		}
	}
	for _, v := range pending {
		if err := m.apply(ctx, p, v, true); err != nil {
			return err
		}
	}
	return nil
}

// downTo rolls back the applied migrations above target, newest first (one
// only with one).
func (m Migrator) downTo(ctx context.Context, pool *pgxpool.Pool, target int64, one bool) error {
	p, closeFn, err := m.open(ctx, pool)
	if err != nil {
		return err
	}
	defer closeFn()
	st, err := p.Status(ctx)
	if err != nil {
		return fmt.Errorf("migrate down: %w", err)
	}
	var applied []int64
	for _, s := range st {
		if s.State == goose.StateApplied && s.Source.Version > target {
			applied = append(applied, s.Source.Version)
		}
	}
	slices.Reverse(applied)
	if one {
		if len(applied) == 0 {
			return fmt.Errorf("migrate down: %w", goose.ErrNoNextVersion)
		}
		applied = applied[:1]
	}
	for _, v := range applied {
		if err := m.apply(ctx, p, v, false); err != nil {
			return err
		}
	}
	return nil
}

// apply runs migration version in one direction, retrying lock failures
// within the budget. A version another migrator applied (or rolled back)
// meanwhile counts as done.
func (m Migrator) apply(ctx context.Context, p *goose.Provider, version int64, up bool) error {
	budget := m.LockRetryFor
	if budget <= 0 {
		budget = DefaultMigrateLockRetryFor
	}
	base, maxPause := m.RetryBase, m.RetryMax
	if base <= 0 {
		base = DefaultMigrateRetryBase
	}
	if maxPause <= 0 {
		maxPause = DefaultMigrateRetryMax
	}
	var deadline time.Time // from the first failure
	for attempt := 1; ; attempt++ {
		_, err := p.ApplyVersion(ctx, version, up)
		if err == nil || errors.Is(err, goose.ErrAlreadyApplied) || errors.Is(err, goose.ErrNotApplied) {
			return nil
		}
		state := lockFailure(err)
		if state == "" || ctx.Err() != nil {
			return fmt.Errorf("migrate %s %05d: %w", direction(up), version, err)
		}
		if attempt == 1 {
			deadline = time.Now().Add(budget)
		}
		left := max(time.Until(deadline), 0)
		if attempt > 1 && left == 0 {
			return &LockRetryError{Version: version, Up: up, Attempts: attempt, Budget: budget, SQLState: state}
		}
		pause := min(retryPause(base, maxPause, attempt), left)
		m.log().Warn("migration waits for a lock held by other sessions; retrying",
			"version", version, "direction", direction(up), "attempt", attempt,
			"sqlstate_class", state[:2], "retry_in", pause.Round(time.Millisecond).String())
		if m.OnRetry != nil {
			m.OnRetry(MigrationRetry{Version: version, Up: up, Attempt: attempt, SQLState: state, Pause: pause})
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("migrate %s %05d: stopped while retrying after %d attempts: %w", direction(up), version, attempt, ctx.Err())
		case <-t.C:
		}
	}
}

// lockFailure returns the SQLSTATE of err when it is a lock failure a
// migration may be retried after (the transaction was rolled back): 55P03
// lock_not_available or 40P01 deadlock_detected; "" otherwise.
func lockFailure(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "55P03" || pgErr.Code == "40P01") {
		return pgErr.Code
	}
	return ""
}

// retryPause is the wait after failed attempt number attempt: drawn from the
// upper half of the capped exponential bound (client/backoff), so that
// between two attempts the fleet runs for at least half the bound without a
// lock request of ours ahead of its statements, and retries of several
// runners spread out.
func retryPause(base, maxPause time.Duration, attempt int) time.Duration {
	return backoff.Capped(base, maxPause, attempt)/2 + backoff.Full(base, maxPause, attempt)/2
}
