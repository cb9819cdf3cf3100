package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// Neither the worker holding the lease when the job was cancelled, nor an
// expired or superseded one, can overwrite CANCELLED with any fenced write.
func TestNoLeaseCanOverwriteCancelled(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	ids := pgtest.InsertN(t, pool, 1, pg.NewJob{MaxAttempts: 3})
	old := claim(t, pool, "worker-old1", 1, time.Minute).Claimed[0]
	pgtest.ExpireLease(t, pool, ids[0], time.Millisecond)
	live := claim(t, pool, "worker-new1", 1, time.Minute).Claimed[0] // supersedes old
	out, err := pg.CancelJob(ctx, pool, pg.CancelParams{PrincipalScopeHash: pgtest.SHA("owner"), JobID: ids[0], CancellationKeyHash: pgtest.SHA("k")})
	if err != nil || !out.Cancelled || out.PreviousStatus != pg.StatusRunning {
		t.Fatalf("cancel: %+v %v", out, err)
	}
	for _, c := range []lease.Claim{old, live} {
		if err := lease.Retry(ctx, pool, c.Ref, 0); !errors.Is(err, lease.ErrLost) {
			t.Errorf("retry: %v", err)
		}
		if err := lease.Fail(ctx, pool, c.Ref, codes.TargetFailure); !errors.Is(err, lease.ErrLost) {
			t.Errorf("fail: %v", err)
		}
		if err := lease.Release(ctx, pool, c.Ref); !errors.Is(err, lease.ErrLost) {
			t.Errorf("release: %v", err)
		}
		err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error { _, err := pgtest.SucceedOne(ctx, tx, c.Ref); return err })
		if !errors.Is(err, lease.ErrLost) {
			t.Errorf("succeed: %v", err)
		}
		ren, err := lease.Renew(ctx, pool, c.OwnerID, []lease.Ref{c.Ref}, time.Hour)
		if err != nil || ren[0].Renewed {
			t.Errorf("renew: %+v %v", ren, err)
		}
	}
	if res := claim(t, pool, "worker-late", 5, time.Minute); len(res.Claimed) != 0 || res.Exhausted != 0 {
		t.Fatalf("a cancelled job was claimable: %+v", res)
	}
	st, err := lease.InspectLost(ctx, pool, ids[0])
	if err != nil || st.Status != pg.StatusCancelled {
		t.Fatalf("status %+v %v", st, err)
	}
}
