package pgtest

import (
	"context"

	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// SucceedOne applies the fenced terminal success of one lease by the
// product statement (lease.Succeed) inside tx and writes no target rows: a
// test finishing a claim by hand. It returns lease.ErrLost when the lease
// did not match.
func SucceedOne(ctx context.Context, tx pg.DBTX, ref lease.Ref) (lease.Won, error) {
	won, err := lease.Succeed(ctx, tx, ref.OwnerID, []lease.Ref{ref})
	if err != nil {
		return lease.Won{}, err
	}
	if len(won) == 0 {
		return lease.Won{}, lease.ErrLost
	}
	return won[0], nil
}
