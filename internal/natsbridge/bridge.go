// Package natsbridge connects an intake-side process to NATS: it opens the
// connection, runs the outbox relay (database → NATS) and, when enabled, the
// JetStream request consumer (NATS → intake). cmd/intake, `etlctl relay` and
// `etlctl dev` share it so the three start the same way.
//
// NATS is advisory: a bridge started while NATS is down keeps retrying in
// the background and the process keeps serving from the database.
package natsbridge

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/outbox"
)

// Options configure Start.
type Options struct {
	NATS config.NATS
	Pool *pgxpool.Pool
	// Service receives NATS job requests; nil runs the relay only.
	Service *intake.Service
	// MaxRequestBytes caps a request message (the intake's payload limit).
	MaxRequestBytes int
	// Name identifies the connection in NATS monitoring.
	Name     string
	Registry prometheus.Registerer
	Log      *slog.Logger
}

// Bridge is a running relay (and request consumer).
type Bridge struct {
	nc       *nats.Conn
	relay    *outbox.Relay
	consumer *events.RequestConsumer
}

// Start connects and starts the relay and, when o.NATS.RequestsEnabled and
// o.Service is set, the request consumer. It returns (nil, nil) when NATS is
// not configured.
func Start(ctx context.Context, o Options) (*Bridge, error) {
	if !o.NATS.Enabled() {
		return nil, nil
	}
	em := metrics.NewEvents(o.Registry)
	nc, err := events.Connect(ctx, events.Options{URL: o.NATS.URL, Name: o.Name, CredsFile: o.NATS.CredsFile,
		TLSCAFile: o.NATS.TLSCAFile, TLSCertFile: o.NATS.TLSCertFile, TLSKeyFile: o.NATS.TLSKeyFile}, o.Log, em)
	if err != nil {
		return nil, fmt.Errorf("connect NATS: %w", err)
	}
	b := &Bridge{nc: nc}
	b.relay, err = outbox.New(o.Pool, nc, o.NATS.SubjectPrefix, o.Log, metrics.NewOutbox(o.Registry),
		outbox.Options{PollInterval: o.NATS.OutboxPollInterval, BatchSize: o.NATS.OutboxBatchSize})
	if err == nil {
		err = b.relay.Start(ctx)
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("start outbox relay: %w", err)
	}
	if o.NATS.RequestsEnabled && o.Service != nil {
		b.consumer, err = events.NewRequestConsumer(nc, o.NATS.SubjectPrefix, intake.NATSRequests{Service: o.Service},
			o.Log, em, events.RequestConsumerOptions{MaxRequestBytes: int32(o.MaxRequestBytes), Concurrency: o.NATS.RequestConcurrency,
				MaxDeliveries: o.NATS.RequestMaxDeliveries, StreamMaxBytes: int64(o.NATS.RequestsMaxBytes),
				StreamMaxPerPrincipal: int64(o.NATS.RequestsMaxPerPrincipal)})
		if err == nil {
			err = b.consumer.Start(ctx)
		}
		if err != nil {
			_ = b.relay.Stop(ctx)
			nc.Close()
			return nil, fmt.Errorf("start request consumer: %w", err)
		}
	}
	return b, nil
}

// Stop stops the consumer, then the relay, then closes the connection. Safe
// on a nil Bridge and safe to call twice.
func (b *Bridge) Stop(ctx context.Context) error {
	if b == nil {
		return nil
	}
	var err error
	if b.consumer != nil {
		err = b.consumer.Stop(ctx)
	}
	if e := b.relay.Stop(ctx); err == nil {
		err = e
	}
	b.nc.Close()
	return err
}

// RelayState is the outbox relay's NATS state for the operator console:
// "connected", "disconnected", or "not configured" (nil Bridge: NATS_URL
// unset).
func (b *Bridge) RelayState() string {
	if b == nil || b.nc == nil {
		return "not configured"
	}
	if b.nc.IsConnected() {
		return "connected"
	}
	return "disconnected"
}
