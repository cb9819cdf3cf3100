// Package console is the operator console (issue 14): server-rendered HTML
// pages under /console/ and the data behind the operator JSON endpoints
// under /api/ops/ (served by package httpapi). Operators see every owner's
// jobs but never a payload, a key or a principal: the owner is a short
// prefix of the principal scope hash.
//
// Every page is answered by bounded reads (internal/pg/ops.go): the active
// jobs through the narrow claim queue, the job list by a capped primary-key
// walk, one job by primary key. Authentication and the operator decision
// happen before the console (httpapi); the console gets the operator's
// principal scope hash in the request context.
package console

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// DB is what the console reads and writes through (a pgxpool.Pool).
type DB = pg.DBTX

// Defaults of Options.
const (
	// DefaultBulkCancelCap is the most jobs one bulk cancellation cancels
	// (MIGHTYETL_CONSOLE_BULK_CANCEL_CAP).
	DefaultBulkCancelCap = 100
	// DefaultSampleEvery is the spacing of the rate samples.
	DefaultSampleEvery = 30 * time.Second
)

// Options configure a Console. Zero values take the defaults noted.
type Options struct {
	// DB runs the console's reads and cancellations. Required.
	DB DB
	// HashKey is MIGHTYETL_PRINCIPAL_HASH_KEY; it keys the CSRF tokens and,
	// through PayloadDigestKey, the payload digest tags.
	HashKey []byte
	// BulkCancelCap bounds one bulk cancellation; zero means
	// DefaultBulkCancelCap.
	BulkCancelCap int
	// RelayState reports the outbox relay's NATS state ("connected",
	// "disconnected", "not configured"); nil means "not configured".
	RelayState func() string
	// Logger receives one line per operator action (action, outcome,
	// counts; never a payload, principal, hash or job id); nil discards.
	Logger *slog.Logger
	// SampleEvery is the spacing of the rate samples; zero means
	// DefaultSampleEvery.
	SampleEvery time.Duration
	// Replay runs an operator's replay (intake.Service.OperatorReplay);
	// nil means the console offers no replay.
	Replay func(context.Context, intake.OperatorReplayRequest) (intake.ReplayResult, error)
	// MaxPayloadBytes bounds the body of a replay (MIGHTYETL_MAX_PAYLOAD_BYTES);
	// zero means intake.DefaultMaxPayloadBytes.
	MaxPayloadBytes int64
}

// Console serves the operator pages. Safe for concurrent use.
type Console struct {
	opts    Options
	sampler *Sampler
	// digestKey keys the payload digest tags (PayloadDigestKey).
	digestKey  []byte
	relayState atomic.Pointer[func() string]
}

// SetRelayState replaces Options.RelayState (the relay starts after the
// HTTP server is built).
func (c *Console) SetRelayState(f func() string) {
	if f != nil {
		c.relayState.Store(&f)
	}
}

// WithDefaults returns o with every unset field that has a default set to
// it: DefaultBulkCancelCap, a "not configured" relay state, a discarding
// logger, DefaultSampleEvery and intake.DefaultMaxPayloadBytes (a non-positive
// number counts as unset).
func (o Options) WithDefaults() Options {
	o.BulkCancelCap = cmp.Or(max(o.BulkCancelCap, 0), DefaultBulkCancelCap)
	if o.RelayState == nil {
		o.RelayState = func() string { return "not configured" }
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.SampleEvery = cmp.Or(max(o.SampleEvery, 0), DefaultSampleEvery)
	o.MaxPayloadBytes = cmp.Or(max(o.MaxPayloadBytes, 0), intake.DefaultMaxPayloadBytes)
	return o
}

// New returns a Console.
func New(opts Options) (*Console, error) {
	if opts.DB == nil {
		return nil, errors.New("console: no database")
	}
	opts = opts.WithDefaults()
	c := &Console{opts: opts, sampler: newSampler(opts.DB, opts.SampleEvery, opts.Logger),
		digestKey: PayloadDigestKey(opts.HashKey)}
	c.SetRelayState(opts.RelayState)
	return c, nil
}

// BulkCancelCap is the most jobs one bulk cancellation cancels.
func (c *Console) BulkCancelCap() int { return c.opts.BulkCancelCap }

// Jobs lists jobs for a filter.
func (c *Console) Jobs(ctx context.Context, f Filter) (pg.OpsPage, error) {
	return pg.OpsListJobs(ctx, c.opts.DB, f.params())
}
