package events

import (
	"bytes"
	"fmt"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/mightyetl/mightyetl/internal/metrics"
)

// SubscribeWakeups calls fn for every wake-up on "<prefix>.jobs.available".
// The body is ignored: a wake-up only means "there may be claimable work";
// the worker still claims through the database. fn runs on the
// subscription's goroutine, one call at a time, and must not block (signal a
// channel). The subscription survives reconnects; the caller unsubscribes or
// closes the connection. m may be nil.
func SubscribeWakeups(nc *nats.Conn, prefix string, m *metrics.Events, fn func()) (*nats.Subscription, error) {
	s, err := NewSubjects(prefix)
	if err != nil {
		return nil, err
	}
	if m == nil {
		m = metrics.NewEvents(nil)
	}
	received := m.WakeupsReceived.WithLabelValues(metrics.WakeupAvailable)
	sub, err := nc.Subscribe(s.JobsAvailable(), func(*nats.Msg) {
		received.Inc()
		fn()
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe to wake-ups: %w", err)
	}
	return sub, nil
}

// SubscribeRevocations calls fn with the job id of every revocation on
// "<prefix>.jobs.revoked". A body that is not a UUID is ignored and counted
// in m.Malformed. A revocation is advisory: fn should cancel the handler of
// that job if this worker runs it; the database has already decided. fn runs
// on the subscription's goroutine, one call at a time, and must not block.
// m may be nil.
func SubscribeRevocations(nc *nats.Conn, prefix string, m *metrics.Events, fn func(uuid.UUID)) (*nats.Subscription, error) {
	s, err := NewSubjects(prefix)
	if err != nil {
		return nil, err
	}
	if m == nil {
		m = metrics.NewEvents(nil)
	}
	received := m.WakeupsReceived.WithLabelValues(metrics.WakeupRevoked)
	malformed := m.Malformed.WithLabelValues(metrics.WakeupRevoked)
	sub, err := nc.Subscribe(s.JobsRevoked(), func(msg *nats.Msg) {
		id, ok := parseJobID(msg.Data)
		if !ok {
			malformed.Inc()
			return
		}
		received.Inc()
		fn(id)
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe to revocations: %w", err)
	}
	return sub, nil
}

// parseJobID accepts exactly the canonical 36-character UUID text the relay
// sends (surrounding white space tolerated) and rejects the nil UUID.
func parseJobID(b []byte) (uuid.UUID, bool) {
	b = bytes.TrimSpace(b)
	if len(b) != 36 {
		return uuid.Nil, false
	}
	id, err := uuid.ParseBytes(b)
	if err != nil || id == uuid.Nil {
		return uuid.Nil, false
	}
	return id, true
}
