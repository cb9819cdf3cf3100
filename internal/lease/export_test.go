package lease

import (
	"context"

	"github.com/mightyetl/mightyetl/internal/pg"
)

// The lease statements, for plan tests (plans_test.go).
var (
	ClaimSQL   = claimSQL
	RenewSQL   = renewSQL
	SucceedSQL = succeedSQL
)

// ClaimJobsWith is ClaimJobs running sql instead of the claim statement: a
// test's copy of it with a barrier injected.
func ClaimJobsWith(ctx context.Context, db pg.DBTX, sql string, p ClaimParams) (ClaimResult, error) {
	return claimJobs(ctx, db, sql, p)
}
