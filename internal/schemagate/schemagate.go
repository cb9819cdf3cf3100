// Package schemagate holds the intake's side of the schema-compatibility
// contract (pg.CheckCompatibility, docs/operations/upgrades.md): a Gate
// re-reads the database's verdict every Interval and answers Compatible
// from memory, so the HTTP API refuses submissions and the NATS request
// consumer pauses while this binary may not run against the schema.
package schemagate

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/startstop"
)

// DefaultInterval is Options.Interval when zero: how often the verdict is
// re-read.
const DefaultInterval = 10 * time.Second

// Options configure a Gate.
type Options struct {
	// DB is the pool the check runs on (two indexed reads per check).
	// Required.
	DB *pgxpool.Pool
	// Interval is the pause between checks; zero means DefaultInterval.
	Interval time.Duration
	// CheckTimeout bounds one check; zero means 5 s.
	CheckTimeout time.Duration
	// Logger receives one line per change of verdict; nil discards.
	Logger *slog.Logger
	// OnCheck, when set, is called after every check that answered, with
	// its verdict (a test hook; it must not block for long).
	OnCheck func(compatible bool)
}

// Gate is the latest verdict of pg.CheckCompatibility, refreshed by a
// goroutine between Start and Stop (internal/startstop). The zero verdict
// (before the first check answers, or when every check so far failed) is
// not compatible; a failed check keeps the last verdict. Safe for
// concurrent use.
type Gate struct {
	opts Options
	ss   startstop.Base

	mu      sync.Mutex
	ok      bool
	checked bool          // a check answered at least once
	changed chan struct{} // closed and replaced when ok changes
}

// New returns a Gate on opts; nothing runs until Start.
func New(opts Options) *Gate {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.CheckTimeout <= 0 {
		opts.CheckTimeout = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Gate{opts: opts, changed: make(chan struct{})}
}

// Compatible reports the latest verdict: false before the first check
// answered.
func (g *Gate) Compatible() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ok
}

// Watch returns the latest verdict and a channel closed at its next
// change.
func (g *Gate) Watch() (compatible bool, changed <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ok, g.changed
}

// Start checks once (so the verdict is known when Start returns, unless
// that check failed), then re-checks every Interval until Stop.
func (g *Gate) Start(ctx context.Context) error {
	return g.ss.Start(ctx, func(ctx context.Context) (startstop.StopFunc, error) {
		g.RunOnce(ctx)
		runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() {
			defer close(done)
			t := time.NewTicker(g.opts.Interval)
			defer t.Stop()
			for {
				select {
				case <-runCtx.Done():
					return
				case <-t.C:
					g.RunOnce(runCtx)
				}
			}
		}()
		return func(context.Context) error {
			cancel()
			<-done
			return nil
		}, nil
	})
}

// Stop ends the refresh loop and waits for it; safe to call twice. The
// verdict stays as it was.
func (g *Gate) Stop(ctx context.Context) error { return g.ss.Stop(ctx) }

// RunOnce checks the schema once and records the verdict, logging one line
// naming the schema version, this binary's level and the level the schema
// requires when the verdict changes (or the first answer is
// incompatible). A failed check is logged by its class and keeps the
// verdict.
func (g *Gate) RunOnce(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, g.opts.CheckTimeout)
	c, err := pg.CheckCompatibility(cctx, g.opts.DB)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			g.opts.Logger.Warn("schema compatibility check failed; will retry", "error_class", pg.ErrorClass(err))
		}
		return
	}
	g.mu.Lock()
	first := !g.checked
	g.checked = true
	change := c.Compatible != g.ok
	g.ok = c.Compatible
	if change {
		close(g.changed)
		g.changed = make(chan struct{})
	}
	g.mu.Unlock()
	if change || (first && !c.Compatible) {
		attrs := []any{"schema_version", c.Applied, "binary_compat_level", pg.BinaryCompatLevel,
			"required_binary_level", c.RequiredBinary, "schema_range", fmt.Sprintf("%d..%d", pg.MinSchemaVersion, pg.MaxSchemaVersion)}
		if c.Compatible {
			g.opts.Logger.Info("schema compatible; accepting submissions and NATS requests", attrs...)
		} else {
			g.opts.Logger.Error("schema incompatible; refusing submissions and pausing NATS requests: "+c.Reason, attrs...)
		}
	}
	if g.opts.OnCheck != nil {
		g.opts.OnCheck(c.Compatible)
	}
}
