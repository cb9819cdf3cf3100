package pg

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A Backfill fills in data a migration cannot, in bounded batches outside
// any migration transaction (docs/operations/upgrades.md, "Backfills"): the
// migration adds what the new binaries write (a nullable column, a new
// table), the new binaries write it for new rows, and the backfill brings
// the old rows along while the fleet runs. Progress lives in the data
// itself: a row is "to do" when Remaining's predicate holds for it, Batch
// makes it false, so a run can be interrupted at any point and run again.
type Backfill struct {
	// Name is how `etlctl backfill run NAME` finds it: lowercase letters,
	// digits and underscores.
	Name string
	// Description is one line for `etlctl backfill list`.
	Description string
	// Remaining is a query returning one integer: the rows still to do.
	Remaining string
	// Batch is one statement that does at most $1 rows still to do, chosen
	// with FOR UPDATE SKIP LOCKED (a row a writer holds is left for a later
	// batch, never waited for), and reports them as its affected rows. It
	// must be idempotent: a row it did no longer matches, so rerunning it
	// never does a row twice.
	Batch string
}

var backfillName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// BackfillRegistry holds named backfills.
type BackfillRegistry struct {
	mu sync.Mutex
	m  map[string]Backfill
}

// Register adds b; its name must be valid and unused, and its statements
// set.
func (r *BackfillRegistry) Register(b Backfill) error {
	if !backfillName.MatchString(b.Name) {
		return fmt.Errorf("backfill name %q: want lowercase letters, digits and underscores", b.Name)
	}
	if b.Remaining == "" || b.Batch == "" || b.Description == "" {
		return fmt.Errorf("backfill %s: description, remaining query and batch statement are required", b.Name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.m[b.Name]; dup {
		return fmt.Errorf("backfill %s registered twice", b.Name)
	}
	if r.m == nil {
		r.m = map[string]Backfill{}
	}
	r.m[b.Name] = b
	return nil
}

// Get returns the backfill named name.
func (r *BackfillRegistry) Get(name string) (Backfill, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.m[name]
	return b, ok
}

// List returns every backfill, by name.
func (r *BackfillRegistry) List() []Backfill {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Backfill, 0, len(r.m))
	for _, b := range r.m {
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b Backfill) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// Backfills is the product's registry, read by `etlctl backfill`. It is
// empty: no migration up to this release left rows for a later fill (every
// column added since 00001 is NULL by meaning on the rows before it, and
// the one conversion, 00014's, ran inside its migration). A migration that
// needs one registers it here, in the release that adds the column.
var Backfills = &BackfillRegistry{}

// Defaults of BackfillOptions.
const (
	DefaultBackfillBatchSize        = 1000
	DefaultBackfillLockTimeout      = time.Second
	DefaultBackfillStatementTimeout = 30 * time.Second
	DefaultBackfillRetryFor         = 10 * time.Minute
)

// BackfillOptions tunes RunBackfill. Zero values take the defaults.
type BackfillOptions struct {
	// BatchSize is the most rows one batch does.
	BatchSize int
	// Pause is waited between two batches (0: none), to leave the database
	// to the fleet.
	Pause time.Duration
	// LockTimeout and StatementTimeout bound each batch's transaction.
	LockTimeout, StatementTimeout time.Duration
	// RetryFor bounds how long a batch that times out on a lock (55P03,
	// or 40P01) is retried, and how long the run waits when rows remain
	// but every one of them is locked by other transactions.
	RetryFor time.Duration
	// RetryBase and RetryMax shape the pause between retries (see
	// DefaultMigrateRetryBase); zero means those defaults.
	RetryBase, RetryMax time.Duration
	// OnBatchStart, when set, is called before each batch (from 1).
	OnBatchStart func(batch int)
	// OnBatch, when set, is called after each committed batch.
	OnBatch func(BackfillProgress)
	// OnRetry, when set, is called when a batch is retried (SQLSTATE).
	OnRetry func(batch int, sqlState string)
}

// BackfillProgress reports one committed batch.
type BackfillProgress struct {
	Batch int   // from 1 in this run
	Rows  int64 // rows this batch did
	Done  int64 // rows this run did so far
}

// BackfillResult is the outcome of a run.
type BackfillResult struct {
	Batches   int
	Done      int64 // rows this run did
	Remaining int64 // rows still to do when the run ended (0: complete)
	Stopped   bool  // the run stopped early because its context ended
}

// BackfillRemaining runs b's remaining-rows query.
func BackfillRemaining(ctx context.Context, db DBTX, b Backfill) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, b.Remaining).Scan(&n); err != nil {
		return 0, fmt.Errorf("backfill %s: count remaining rows: %w", b.Name, err)
	}
	return n, nil
}

// ErrBackfillStuck reports rows that remain while no batch can take any of
// them for longer than the retry budget.
var ErrBackfillStuck = errors.New("rows remain but no batch could take any")

// RunBackfill runs b in batches until nothing remains or ctx ends. Each
// batch is its own short transaction under LockTimeout and
// StatementTimeout; a batch failing with 55P03 or 40P01 was rolled back
// and is retried with capped, jittered backoff within RetryFor. When ctx
// ends the batch in flight still finishes (committed, or rolled back by
// its own timeouts) and the run stops after it with Stopped set: the rows
// done stay done and a later run takes up the rest.
func RunBackfill(ctx context.Context, pool *pgxpool.Pool, b Backfill, o BackfillOptions) (BackfillResult, error) {
	o = o.withDefaults()
	var res BackfillResult
	// The batch in flight is not interrupted by ctx: its own timeouts bound
	// it.
	work := context.WithoutCancel(ctx)
	var stuckSince time.Time
	stuckRound := 1
	for {
		if ctx.Err() != nil {
			return res.stop(work, pool, b, o)
		}
		batch := res.Batches + 1
		if o.OnBatchStart != nil {
			o.OnBatchStart(batch)
		}
		n, err := runBatch(ctx, work, pool, b, o, batch)
		if err != nil {
			if errors.Is(err, errStoppedRetrying) {
				return res.stop(work, pool, b, o)
			}
			return res, err
		}
		res.Batches = batch
		if n > 0 {
			res.Done += n
			stuckSince, stuckRound = time.Time{}, 1
			if o.OnBatch != nil {
				o.OnBatch(BackfillProgress{Batch: batch, Rows: n, Done: res.Done})
			}
			if !sleepCtx(ctx, o.Pause) {
				return res.stop(work, pool, b, o)
			}
			continue
		}
		// An empty batch: done, or every row left is locked by a writer.
		left, err := BackfillRemaining(work, pool, b)
		if err != nil {
			return res, err
		}
		if left == 0 {
			return res, nil
		}
		if stuckSince.IsZero() {
			stuckSince = time.Now()
		} else if time.Since(stuckSince) > o.RetryFor {
			res.Remaining = left
			return res, fmt.Errorf("backfill %s: %d %w for %s (locked by other transactions, or the batch statement does not select what the remaining query counts)",
				b.Name, left, ErrBackfillStuck, o.RetryFor)
		}
		if !sleepCtx(ctx, retryPause(o.RetryBase, o.RetryMax, stuckRound)) {
			return res.stop(work, pool, b, o)
		}
		stuckRound++
	}
}

// stop is the result of a run stopped early: Stopped, and the rows still
// to do (counted within the statement timeout).
func (r BackfillResult) stop(ctx context.Context, pool *pgxpool.Pool, b Backfill, o BackfillOptions) (BackfillResult, error) {
	r.Stopped = true
	ctx, cancel := context.WithTimeout(ctx, o.StatementTimeout)
	defer cancel()
	left, err := BackfillRemaining(ctx, pool, b)
	r.Remaining = left
	return r, err
}

var errStoppedRetrying = errors.New("stopped while retrying")

// runBatch runs one batch in its own transaction, retrying lock failures;
// it returns the rows the batch did.
func runBatch(ctx, work context.Context, pool *pgxpool.Pool, b Backfill, o BackfillOptions, batch int) (int64, error) {
	var deadline time.Time
	for attempt := 1; ; attempt++ {
		n, err := batchTx(work, pool, b, o)
		if err == nil {
			return n, nil
		}
		state := lockFailure(err)
		if state == "" {
			return 0, fmt.Errorf("backfill %s: batch %d: %w", b.Name, batch, err)
		}
		if attempt == 1 {
			deadline = time.Now().Add(o.RetryFor)
		} else if time.Now().After(deadline) {
			return 0, fmt.Errorf("backfill %s: batch %d gave up after %d attempts: each timed out waiting for a lock (SQLSTATE %s) for %s; the rows done so far stay done, run it again",
				b.Name, batch, attempt, state, o.RetryFor)
		}
		if o.OnRetry != nil {
			o.OnRetry(batch, state)
		}
		if !sleepCtx(ctx, retryPause(o.RetryBase, o.RetryMax, attempt)) {
			return 0, errStoppedRetrying
		}
	}
}

// batchTx is one batch's transaction.
func batchTx(ctx context.Context, pool *pgxpool.Pool, b Backfill, o BackfillOptions) (n int64, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true)",
			msSetting(o.LockTimeout), msSetting(o.StatementTimeout)); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, b.Batch, o.BatchSize)
		n = tag.RowsAffected()
		return err
	})
	return n, err
}

func msSetting(d time.Duration) string { return fmt.Sprintf("%dms", max(d.Milliseconds(), 1)) }

func (o BackfillOptions) withDefaults() BackfillOptions {
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBackfillBatchSize
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = DefaultBackfillLockTimeout
	}
	if o.StatementTimeout <= 0 {
		o.StatementTimeout = DefaultBackfillStatementTimeout
	}
	if o.RetryFor <= 0 {
		o.RetryFor = DefaultBackfillRetryFor
	}
	if o.RetryBase <= 0 {
		o.RetryBase = DefaultMigrateRetryBase
	}
	if o.RetryMax <= 0 {
		o.RetryMax = DefaultMigrateRetryMax
	}
	return o
}

// sleepCtx waits d or until ctx ends; false when ctx ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
