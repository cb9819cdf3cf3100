package pgtest

import (
	"context"
	"testing"

	"github.com/mightyetl/mightyetl/internal/pg"
)

// Count runs query, which must return one integer (a count(*)), and returns
// it; it fails t when the query does.
func Count(t testing.TB, db pg.DBTX, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("pgtest: count %q: %v", query, err)
	}
	return n
}
