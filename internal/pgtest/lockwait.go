package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

// WaitForLockWait waits, with a deadline, until a session of pool's database
// runs a statement whose text starts with prefix and waits on a heavyweight
// lock (a row, a relation, an advisory lock): the barrier a test uses to
// commit something while that statement is known to be blocked.
func WaitForLockWait(t testing.TB, pool *pgxpool.Pool, prefix string) {
	t.Helper()
	testwait.For(t, 30*time.Second, "a session to wait on a lock in "+prefix, func() bool {
		var n int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND left(query, length($1)) = $1`, prefix).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
}
