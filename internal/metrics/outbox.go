package metrics

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Outbox event kinds, as stored in etl_outbox_events.event_kind; the kind
// label of OutboxPublished takes exactly these values.
const (
	OutboxKindAvailable = "job_available"
	OutboxKindRevoked   = "lease_revoked"
	OutboxKindLifecycle = "job_lifecycle"
)

// Outcomes of one outbox row, the outcome label of OutboxPublished.
const (
	// OutboxPublished: the message left for NATS (core) or JetStream acknowledged it.
	OutboxPublished = "published"
	// OutboxFailed: publishing failed; lifecycle rows stay in the outbox and are retried.
	OutboxFailed = "failed"
	// OutboxDropped: an advisory row was deleted without reaching NATS (NATS
	// unavailable), or a malformed row was discarded.
	OutboxDropped = "dropped"
)

// Wake-up sources of the outbox relay, the source label of OutboxWakeups.
const (
	WakeNotify    = "notify"    // LISTEN etl_outbox_events (or the listener (re)connected)
	WakePoll      = "poll"      // the fallback poll interval elapsed
	WakeReconnect = "reconnect" // the NATS connection came back
)

// Outbox is the outbox relay's collectors. The zero value is not usable; use
// NewOutbox. Safe for concurrent use.
type Outbox struct {
	// Backlog is mightyetl_outbox_backlog: rows waiting in etl_outbox_events,
	// exact up to 20,000 lifecycle rows and estimated beyond (the relay's
	// backlog measurement bounds its work).
	Backlog prometheus.Gauge
	// OldestAge is mightyetl_outbox_oldest_age_seconds: age of the oldest
	// waiting row by the database clock; 0 when the outbox is empty.
	OldestAge prometheus.Gauge
	// Published is mightyetl_outbox_publish_total{kind,outcome}, counted per
	// outbox row (a coalesced wake-up counts each of its rows).
	Published *prometheus.CounterVec
	// Wakeups is mightyetl_outbox_relay_wakeups_total{source}.
	Wakeups *prometheus.CounterVec
	// BatchErrors is mightyetl_outbox_batch_errors_total: relay batches that
	// ended in an error (database or JetStream); the batch is retried.
	BatchErrors prometheus.Counter
	// ReusedIDs is mightyetl_outbox_reused_ids_total: lifecycle events
	// republished under the suffixed id "<event id>@<occurred_at µs>"
	// because JetStream reported their plain id a duplicate of a stored
	// message of another transition (an outbox id handed out again after a
	// failover to an asynchronous standby) or of a message no longer in the
	// stream.
	ReusedIDs prometheus.Counter
}

// NewOutbox creates the relay's collectors and registers them on reg (nil
// registers nothing, for tests). Registering twice on one registry reuses the
// collectors already there, so two relays in one process share their series.
func NewOutbox(reg prometheus.Registerer) *Outbox {
	m := &Outbox{
		Backlog: registerOrReuse(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mightyetl_outbox_backlog",
			Help: "Rows waiting in the transactional outbox (etl_outbox_events); exact up to 20000 lifecycle rows, estimated beyond.",
		})),
		OldestAge: registerOrReuse(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mightyetl_outbox_oldest_age_seconds",
			Help: "Age of the oldest outbox row by the database clock, in seconds; 0 when empty.",
		})),
		Published: registerOrReuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mightyetl_outbox_publish_total",
			Help: "Outbox rows handled by the relay, by event kind and outcome (published, failed, dropped).",
		}, []string{"kind", "outcome"})),
		Wakeups: registerOrReuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mightyetl_outbox_relay_wakeups_total",
			Help: "Times the outbox relay woke up, by source (notify, poll, reconnect).",
		}, []string{"source"})),
		BatchErrors: registerOrReuse(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mightyetl_outbox_batch_errors_total",
			Help: "Outbox relay batches that failed and will be retried.",
		})),
		ReusedIDs: registerOrReuse(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mightyetl_outbox_reused_ids_total",
			Help: "Lifecycle events republished under a suffixed id because their outbox id was already used by another stored event (failover to an asynchronous standby).",
		})),
	}
	for _, k := range []string{OutboxKindAvailable, OutboxKindRevoked, OutboxKindLifecycle} {
		for _, o := range []string{OutboxPublished, OutboxFailed, OutboxDropped} {
			m.Published.WithLabelValues(k, o)
		}
	}
	for _, s := range []string{WakeNotify, WakePoll, WakeReconnect} {
		m.Wakeups.WithLabelValues(s)
	}
	return m
}

// registerOrReuse registers c on reg and returns it, or returns the
// collector already registered under the same descriptor. A nil reg
// registers nothing. Any other registration error is a programming error
// (conflicting help or labels) and panics, like MustRegister.
func registerOrReuse[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}
