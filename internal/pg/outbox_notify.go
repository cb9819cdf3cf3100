package pg

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// OutboxNotifyChannel is the channel outbox relays LISTEN on for new
// outbox rows.
const OutboxNotifyChannel = "etl_outbox_events"

// outboxNotifySQL wakes the relays from a transaction of its own.
const outboxNotifySQL = `SELECT pg_notify('` + OutboxNotifyChannel + `', '')`

// outboxNotifyTimeout bounds one wake-up statement.
const outboxNotifyTimeout = 5 * time.Second

// OutboxNotifier wakes the outbox relays after a commit that wrote outbox
// group rows (one row for the jobs of an insert, a finish group or a
// replay; migration 00013). Those rows do not NOTIFY inside their own
// transaction: PostgreSQL serialises the commits of notifying transactions
// on one database-wide lock held through the commit's WAL flush, so every
// submit and finish commit waited for the one before it and none shared a
// flush (docs/performance.md has the cost). A wake-up sent in a
// transaction of its own writes no WAL, so it holds that lock for
// microseconds and commits without a flush.
//
// A process that runs its own relay (the intake with NATS) wakes that relay
// in process instead (intake.Service.SetOutboxWake); it uses the notifier
// only when it has no relay running, so other processes' relays still learn
// of its rows by their poll.
//
// Kick never blocks and coalesces: while one wake-up statement runs, any
// number of kicks become one more. A wake-up lost to a crash between the
// commit and the kick costs the relay's poll interval, never an event: the
// rows are durable and the relay polls.
type OutboxNotifier struct {
	db DBTX

	mu      sync.Mutex
	sending bool // a goroutine is sending
	again   bool // a kick arrived while sending
}

// NewOutboxNotifier returns a notifier that sends its wake-ups on db (a
// pool: each wake-up is its own transaction).
func NewOutboxNotifier(db DBTX) *OutboxNotifier { return &OutboxNotifier{db: db} }

// Kick asks for a wake-up after a commit; a nil notifier does nothing.
func (n *OutboxNotifier) Kick() {
	if n == nil {
		return
	}
	n.mu.Lock()
	if n.sending {
		n.again = true
		n.mu.Unlock()
		return
	}
	n.sending = true
	n.mu.Unlock()
	go n.send()
}

// NotifyOutbox wakes the outbox relays once, now: on a pool in a
// transaction of its own, inside a caller's transaction at its commit.
// OutboxNotifier is the coalescing form for hot paths.
func NotifyOutbox(ctx context.Context, db DBTX) error {
	if _, err := db.Exec(ctx, outboxNotifySQL); err != nil {
		return fmt.Errorf("notify outbox relays: %w", err)
	}
	return nil
}

func (n *OutboxNotifier) send() {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), outboxNotifyTimeout)
		// An error (database down, pool closed) is not retried: the relay's
		// poll finds the rows.
		_ = NotifyOutbox(ctx, n.db)
		cancel()
		n.mu.Lock()
		if !n.again {
			n.sending = false
			n.mu.Unlock()
			return
		}
		n.again = false
		n.mu.Unlock()
	}
}
