package pg_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// The outbox trigger wakes the relay at commit only for single-job rows
// (migration 00013): a claim with nothing to fail stays silent, and a
// submission's job_available group row stays silent too (its writer wakes
// the relay after commit with pg.OutboxNotifier). Notifications arrive in
// commit order, so a later single-job row, written by a connection of its
// own, must be the first notification the listener sees.
func TestOutboxNotifiesAtCommitOnlyForSingleJobRows(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	listener := listenOutbox(t, url)
	if _, err := lease.ClaimJobs(ctx, pool, lease.ClaimParams{OwnerID: "silent-claimer", Limit: 10, LeaseDuration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// pg.InsertJobs itself, not the pgtest fixture (which wakes the relays
	// after its insert, as the intake does).
	payload := `[{"id":"n1"}]`
	ins, err := pg.InsertJobs(ctx, pool, []pg.NewJob{{Kind: pg.KindDiagnostic, PrincipalScopeHash: pgtest.SHA("owner"),
		SubmissionKeyHash: pgtest.SHA("n1"), RequestDigest: pgtest.SHA(payload), Payload: payload, MaxAttempts: 1}})
	if err != nil || len(ins) != 1 || !ins[0].Created {
		t.Fatalf("insert: %v %+v", err, ins)
	}
	var groupRows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM etl_outbox_events WHERE job_record_ids IS NOT NULL`).Scan(&groupRows); err != nil {
		t.Fatal(err)
	}
	if groupRows != 1 {
		t.Fatalf("the submission wrote %d outbox group rows, want 1", groupRows)
	}

	single, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer single.Close(ctx)
	if _, err := single.Exec(ctx, `INSERT INTO etl_outbox_events (event_kind, job_record_id, job_status, attempt_count, event_code)
		VALUES ('job_lifecycle', $1, 'FAILED', 1, 'etl_worker_attempts_exhausted')`, ins[0].JobID); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n, err := listener.WaitForNotification(waitCtx)
	if err != nil {
		t.Fatalf("a single-job outbox row did not notify at commit: %v", err)
	}
	if n.PID != single.PgConn().PID() {
		t.Fatalf("first notification came from backend %d, want the single-job row's %d: the claim or the group row notified", n.PID, single.PgConn().PID())
	}
}

// OutboxNotifier wakes listeners from a transaction of its own, however
// many kicks arrive at once.
func TestOutboxNotifierWakesListeners(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	listener := listenOutbox(t, url)
	n := pg.NewOutboxNotifier(pool)
	var nilNotifier *pg.OutboxNotifier
	nilNotifier.Kick() // a nil notifier does nothing
	const kicks = 50
	for range kicks {
		n.Kick()
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got, err := listener.WaitForNotification(waitCtx)
	if err != nil {
		t.Fatalf("no wake-up after Kick: %v", err)
	}
	if got.Channel != pg.OutboxNotifyChannel {
		t.Fatalf("wake-up on channel %q, want %q", got.Channel, pg.OutboxNotifyChannel)
	}
}

// listenOutbox returns a connection to url that LISTENs on the outbox
// channel, closed when t ends.
func listenOutbox(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	listener, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { listener.Close(ctx) })
	if _, err := listener.Exec(ctx, "LISTEN "+pg.OutboxNotifyChannel); err != nil {
		t.Fatal(err)
	}
	return listener
}
