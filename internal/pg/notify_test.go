package pg_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// The outbox trigger wakes the relay only for statements that inserted an
// outbox row: a claim with nothing to fail stays silent, a submission speaks.
func TestOutboxNotifiesOnlyWhenRowsAreInserted(t *testing.T) {
	pool, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	listener, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(ctx)
	if _, err := listener.Exec(ctx, "LISTEN etl_outbox_events"); err != nil {
		t.Fatal(err)
	}
	if _, err := lease.ClaimJobs(ctx, pool, lease.ClaimParams{OwnerID: "silent-claimer", Limit: 10, LeaseDuration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	payload := `[{"id":"n1"}]`
	pgtest.InsertJobs(t, pool, pg.NewJob{Payload: payload, MaxAttempts: 1})
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := listener.WaitForNotification(waitCtx); err != nil {
		t.Fatalf("submission did not notify: %v", err)
	}
	// Both statements committed before the first wait returned; a second
	// notification (from the claim) would already be queued.
	shortCtx, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if _, err := listener.WaitForNotification(shortCtx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a statement without outbox rows notified: %v", err)
	}
}
