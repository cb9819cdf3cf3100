package metrics

import "github.com/prometheus/client_golang/prometheus"

// Kinds of asynchronous NATS client errors, the kind label of
// Events.AsyncErrors.
const (
	NATSErrSlowConsumer = "slow_consumer"
	NATSErrPermission   = "permission"
	NATSErrOther        = "other"
)

// Kinds of advisory messages a worker receives, the kind label of
// Events.WakeupsReceived and Events.Malformed.
const (
	WakeupAvailable = "available"
	WakeupRevoked   = "revoked"
)

// Outcomes of one request message, the outcome label of Events.Requests.
const (
	// RequestAccepted: the handler committed and the message was acknowledged.
	RequestAccepted = "accepted"
	// RequestRejected: the handler found the request invalid; the message was
	// terminated and a rejection published.
	RequestRejected = "rejected"
	// RequestRetried: the handler failed transiently; the message was
	// negatively acknowledged for redelivery after a delay.
	RequestRetried = "retried"
	// RequestAckFailed: acknowledging or terminating the message failed; the
	// server redelivers it and the handler converges on the same job.
	RequestAckFailed = "ack_failed"
)

// Events is the NATS side's collectors: connection state, advisory
// messages received, request-consumer outcomes. The zero value is not
// usable; use NewEvents. Safe for concurrent use.
type Events struct {
	// Connected is mightyetl_nats_connected: 1 while the NATS connection is
	// up, 0 while it is down, reconnecting or closed.
	Connected prometheus.Gauge
	// Outages is mightyetl_nats_outages_total: transitions from connected
	// (or never connected) to unavailable.
	Outages prometheus.Counter
	// AsyncErrors is mightyetl_nats_async_errors_total{kind}.
	AsyncErrors *prometheus.CounterVec
	// WakeupsReceived is mightyetl_nats_wakeups_received_total{kind}.
	WakeupsReceived *prometheus.CounterVec
	// Malformed is mightyetl_nats_malformed_messages_total{kind}: advisory
	// messages ignored because their body did not parse.
	Malformed *prometheus.CounterVec
	// Requests is mightyetl_nats_requests_total{outcome}.
	Requests *prometheus.CounterVec
}

// NewEvents creates the NATS collectors and registers them on reg (nil
// registers nothing). Registering twice on one registry reuses the
// collectors already there.
func NewEvents(reg prometheus.Registerer) *Events {
	m := &Events{
		Connected: registerOrReuse(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mightyetl_nats_connected",
			Help: "1 while the NATS connection is up, 0 otherwise.",
		})),
		Outages: registerOrReuse(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mightyetl_nats_outages_total",
			Help: "Times the NATS connection became unavailable.",
		})),
		AsyncErrors: registerOrReuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mightyetl_nats_async_errors_total",
			Help: "Asynchronous NATS client errors, by kind (slow_consumer, permission, other).",
		}, []string{"kind"})),
		WakeupsReceived: registerOrReuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mightyetl_nats_wakeups_received_total",
			Help: "Advisory NATS messages received, by kind (available, revoked).",
		}, []string{"kind"})),
		Malformed: registerOrReuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mightyetl_nats_malformed_messages_total",
			Help: "Advisory NATS messages ignored because their body did not parse, by kind.",
		}, []string{"kind"})),
		Requests: registerOrReuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mightyetl_nats_requests_total",
			Help: "Request messages handled by the request consumer, by outcome (accepted, rejected, retried, ack_failed).",
		}, []string{"outcome"})),
	}
	for _, k := range []string{NATSErrSlowConsumer, NATSErrPermission, NATSErrOther} {
		m.AsyncErrors.WithLabelValues(k)
	}
	for _, k := range []string{WakeupAvailable, WakeupRevoked} {
		m.WakeupsReceived.WithLabelValues(k)
		m.Malformed.WithLabelValues(k)
	}
	for _, o := range []string{RequestAccepted, RequestRejected, RequestRetried, RequestAckFailed} {
		m.Requests.WithLabelValues(o)
	}
	return m
}
