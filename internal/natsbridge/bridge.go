// Package natsbridge connects an intake-side process to NATS: it opens the
// connection, runs the outbox relay (database → NATS) and, when enabled, the
// JetStream request consumer (NATS → intake). The intake process
// (internal/app, for cmd/intake and `etlctl dev`) and `etlctl relay` share
// it so they start the same way.
//
// NATS is advisory: a bridge started while NATS is down keeps retrying in
// the background and the process keeps serving from the database.
package natsbridge

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/outbox"
	"github.com/mightyetl/mightyetl/internal/startstop"
)

// Options configure a Bridge.
type Options struct {
	// NATS is the connection and subject configuration; a NATS_URL that is
	// not set (NATS.Enabled false) makes a bridge that runs nothing.
	NATS config.NATS
	Pool *pgxpool.Pool
	// Service receives NATS job requests; nil runs the relay only.
	Service *intake.Service
	// MaxRequestBytes caps a request message (the intake's payload limit).
	MaxRequestBytes int
	// Name identifies the connection in NATS monitoring.
	Name string
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
func New(o Options) *Bridge { return &Bridge{o: o} }

// Enabled reports whether NATS is configured (NATS_URL set); a bridge that
// is not runs nothing.
func (b *Bridge) Enabled() bool { return b != nil && b.o.NATS.Enabled() }

// Start connects and starts the relay and, when NATS.RequestsEnabled and
// Service is set, the request consumer. Without NATS configured it starts
// nothing and returns nil. An error leaves nothing running (the bridge is
// then stopped); a second Start returns startstop.ErrAlreadyStarted, a
// Start after Stop startstop.ErrStopped.
func (b *Bridge) Start(ctx context.Context) error {
	return b.ss.Start(ctx, b.start)
}

func (b *Bridge) start(ctx context.Context) (startstop.StopFunc, error) {
	o := b.o
	if !o.NATS.Enabled() {
		return func(context.Context) error { return nil }, nil
	}
	em := metrics.NewEvents(o.Registry)
	nc, err := events.Connect(ctx, events.Options{URL: o.NATS.URL, Name: o.Name, CredsFile: o.NATS.CredsFile,
		TLSCAFile: o.NATS.TLSCAFile, TLSCertFile: o.NATS.TLSCertFile, TLSKeyFile: o.NATS.TLSKeyFile}, o.Log, em)
	if err != nil {
		return nil, fmt.Errorf("connect NATS: %w", err)
	}
	relay, err := outbox.New(o.Pool, nc, o.NATS.SubjectPrefix, o.Log, metrics.NewOutbox(o.Registry),
		outbox.Options{PollInterval: o.NATS.OutboxPollInterval, BatchSize: o.NATS.OutboxBatchSize})
	if err == nil {
		err = relay.Start(ctx)
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("start outbox relay: %w", err)
	}
	var consumer *events.RequestConsumer
	if o.NATS.RequestsEnabled && o.Service != nil {
		consumer, err = events.NewRequestConsumer(nc, o.NATS.SubjectPrefix, intake.NATSRequests{Service: o.Service},
			o.Log, em, events.RequestConsumerOptions{MaxRequestBytes: int32(o.MaxRequestBytes), Concurrency: o.NATS.RequestConcurrency,
				MaxDeliveries: o.NATS.RequestMaxDeliveries, StreamMaxBytes: int64(o.NATS.RequestsMaxBytes),
				StreamMaxPerPrincipal: int64(o.NATS.RequestsMaxPerPrincipal)})
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
// configured" (NATS_URL unset, or a nil Bridge).
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
