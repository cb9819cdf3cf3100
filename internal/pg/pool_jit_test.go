package pg_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// A pinned-plan pool runs without JIT: its plans carry the disabled nodes'
// costs (enable_* = off), which would otherwise pass jit_above_cost and
// compile a small statement on every call.
func TestPinnedPlanPoolsRunWithoutJIT(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, pooler := range []pg.Pooler{pg.PoolerNone, pg.PoolerTransaction} {
		pool, err := pg.NewPool(ctx, url, pg.PoolOptions{MaxConns: 1, PinnedPlans: true, Pooler: pooler})
		if err != nil {
			t.Fatal(err)
		}
		// Through a transaction pooler the settings are SET LOCAL in each
		// transaction begun through pg.WithTx.
		var jit string
		err = pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SHOW jit`).Scan(&jit)
		})
		pool.Close()
		if err != nil {
			t.Fatal(err)
		}
		if jit != "off" {
			t.Fatalf("pinned-plan pool (pooler %v): jit = %q, want off", pooler, jit)
		}
	}
}
