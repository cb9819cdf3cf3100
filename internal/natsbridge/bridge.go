// Package natsbridge connects an intake-side process to NATS: it opens the
// connection, runs the outbox relay (database → NATS) and, when enabled, the
// JetStream request consumer (NATS → intake), whose handler also streams
// the Object Store objects large requests reference into PostgreSQL
// (objects.go). The intake process
// (internal/app, for cmd/intake and `etlctl dev`) and `etlctl relay` share
// it so they start the same way.
//
// NATS is advisory: a bridge started while NATS is down keeps retrying in
// the background and the process keeps serving from the database.
package natsbridge

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/outbox"
	"github.com/mightyetl/mightyetl/internal/startstop"
)

// Options configure a Bridge. The parts' options are theirs: a zero field
// takes that part's default (events.Options, outbox.Options,
// events.RequestConsumerOptions); the bridge reads no configuration of
// its own (internal/app builds Options from the process configuration).
type Options struct {
	// Conn is the NATS connection: server URL(s), connection name,
	// credentials and TLS files. An empty Conn.URL makes a bridge that runs
	// nothing (NATS is not configured).
	Conn events.Options
	// SubjectPrefix prefixes every subject and stream name; empty means
	// events.DefaultPrefix.
	SubjectPrefix string
	// Relay tunes the outbox relay.
	Relay outbox.Options
	// ConsumeRequests runs the JetStream request consumer; it needs Service.
	ConsumeRequests bool
	// Requests tunes the request consumer; its MaxRequestBytes should be
	// the intake's payload limit.
	Requests events.RequestConsumerOptions
	// ObjectIngests bounds the Object Store objects the request consumer
	// streams into PostgreSQL at once (MIGHTYETL_NATS_OBJECT_INGESTS); zero
	// means DefaultObjectIngests. An object request that finds every slot
	// taken is redelivered later (ErrObjectIngestsBusy).
	ObjectIngests int
	// Pool runs the relay's batches.
	Pool *pgxpool.Pool
	// Service receives NATS job requests (with ConsumeRequests) and is
	// woken by the relay; nil runs the relay only.
	Service *intake.Service
	// Registry receives the events and outbox metrics at Start (only when
	// NATS is configured); nil registers nothing.
	Registry prometheus.Registerer
	Log      *slog.Logger
}

// Bridge is the relay (and request consumer) of one process with their
// NATS connection. Create it with New; run it with Start and Stop, which
// follow internal/startstop: it runs once, Stop is safe to call twice,
// concurrently and before Start, and returns ctx.Err() when the caller's
// context ends. The nil *Bridge is a bridge that is not configured.
type Bridge struct {
	o  Options
	ss startstop.Base

	mu       sync.Mutex // guards nc for RelayState
	nc       *nats.Conn
	relay    *outbox.Relay
	consumer *events.RequestConsumer
}

// New returns the bridge of o, not yet connected.
func New(o Options) *Bridge {
	o.SubjectPrefix = cmp.Or(o.SubjectPrefix, events.DefaultPrefix)
	return &Bridge{o: o}
}

// Enabled reports whether NATS is configured (Options.Conn.URL set); a
// bridge that is not runs nothing.
func (b *Bridge) Enabled() bool { return b != nil && b.o.Conn.URL != "" }

// Start connects and starts the relay and, when ConsumeRequests and
// Service is set, the request consumer. Without NATS configured it starts
// nothing and returns nil. An error leaves nothing running (the bridge is
// then stopped); a second Start returns startstop.ErrAlreadyStarted, a
// Start after Stop startstop.ErrStopped.
func (b *Bridge) Start(ctx context.Context) error {
	return b.ss.Start(ctx, b.start)
}

func (b *Bridge) start(ctx context.Context) (startstop.StopFunc, error) {
	o := b.o
	if !b.Enabled() {
		return func(context.Context) error { return nil }, nil
	}
	em := metrics.NewEvents(o.Registry)
	nc, err := events.Connect(ctx, o.Conn, o.Log, em)
	if err != nil {
		return nil, fmt.Errorf("connect NATS: %w", err)
	}
	relay, err := outbox.New(o.Pool, nc, o.SubjectPrefix, o.Log, metrics.NewOutbox(o.Registry), o.Relay)
	if err == nil {
		err = relay.Start(ctx)
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("start outbox relay: %w", err)
	}
	var consumer *events.RequestConsumer
	if o.ConsumeRequests && o.Service != nil {
		var h events.RequestHandler
		h, err = NewRequestHandler(nc, o.Service, o.SubjectPrefix, o.ObjectIngests)
		if err == nil {
			consumer, err = events.NewRequestConsumer(nc, o.SubjectPrefix, h, o.Log, em, o.Requests)
		}
		if err == nil {
			err = consumer.Start(ctx)
		}
		if err != nil {
			_ = relay.Stop(context.WithoutCancel(ctx))
			nc.Close()
			return nil, fmt.Errorf("start request consumer: %w", err)
		}
	}
	b.mu.Lock()
	b.nc, b.relay, b.consumer = nc, relay, consumer
	b.mu.Unlock()
	if o.Service != nil {
		// The service's commits wake this relay directly, not through a
		// NOTIFY per group commit; its submissions write no job_available
		// row at all: the relay's connection announces them after the commit.
		o.Service.SetOutboxWake(relay.Wake)
		o.Service.SetAnnouncer(relay.AnnounceAvailable)
	}
	return b.stop, nil
}

// stop stops the consumer, then the relay, then closes the connection. It
// waits for both even after ctx ended (each is bounded: the consumer by its
// handler timeout, the relay by its batch), so the connection is never
// closed under a part still using it; Stop returns ctx.Err() meanwhile.
func (b *Bridge) stop(ctx context.Context) error {
	wait := context.WithoutCancel(ctx)
	if b.consumer != nil {
		_ = b.consumer.Stop(wait)
	}
	if b.o.Service != nil {
		// Commits from now on write their job_available rows and NOTIFY the
		// other relays.
		b.o.Service.SetAnnouncer(nil)
		b.o.Service.SetOutboxWake(nil)
	}
	_ = b.relay.Stop(wait)
	b.nc.Close()
	return nil
}

// Stop stops the consumer, then the relay, then closes the connection. Safe
// on a nil Bridge.
func (b *Bridge) Stop(ctx context.Context) error {
	if b == nil {
		return nil
	}
	return b.ss.Stop(ctx)
}

// RelayState is the outbox relay's NATS state for the operator console:
// "connected", "disconnected" (also before Start and after Stop), or "not
// configured" (no Options.Conn.URL, or a nil Bridge).
func (b *Bridge) RelayState() string {
	if !b.Enabled() {
		return "not configured"
	}
	b.mu.Lock()
	nc := b.nc
	b.mu.Unlock()
	if nc != nil && nc.IsConnected() {
		return "connected"
	}
	return "disconnected"
}
