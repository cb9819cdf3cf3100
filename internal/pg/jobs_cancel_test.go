package pg_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

func repeatHex(c string) string { return strings.Repeat(c, 64) }

func TestCancelJob(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	ids := pgtest.InsertN(t, pool, 1, pg.NewJob{PrincipalScopeHash: repeatHex("a")})
	p := pg.CancelParams{PrincipalScopeHash: repeatHex("a"), JobID: ids[0], CancellationKeyHash: repeatHex("c")}

	if _, err := pg.CancelJob(ctx, pool, pg.CancelParams{PrincipalScopeHash: repeatHex("b"), JobID: ids[0], CancellationKeyHash: repeatHex("c")}); !errors.Is(err, pg.ErrNotFound) {
		t.Fatalf("foreign: %v", err)
	}
	out, err := pg.CancelJob(ctx, pool, p)
	if err != nil || !out.Cancelled || out.PreviousStatus != pg.StatusPending || out.Job.Status != pg.StatusCancelled ||
		out.Job.CancellationCode == nil || *out.Job.CancellationCode != codes.CancelledByOwner {
		t.Fatalf("cancel: %+v %v", out, err)
	}
	again, err := pg.CancelJob(ctx, pool, p)
	if err != nil || again.Cancelled || again.StoredKeyHash != repeatHex("c") || again.Job.UpdatedAt != out.Job.UpdatedAt {
		t.Fatalf("again: %+v %v", again, err)
	}
	if _, err := pg.CancelJob(ctx, pool, pg.CancelParams{PrincipalScopeHash: repeatHex("a"), JobID: uuid.New(), CancellationKeyHash: repeatHex("c")}); !errors.Is(err, pg.ErrNotFound) {
		t.Fatalf("absent: %v", err)
	}
}

func TestListJobs(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	pgtest.InsertN(t, pool, 7, pg.NewJob{PrincipalScopeHash: repeatHex("a")})
	pgtest.InsertN(t, pool, 2, pg.NewJob{PrincipalScopeHash: repeatHex("b")})
	var all []pg.Job
	var after *pg.PageKey
	for {
		page, err := pg.ListJobs(ctx, pool, pg.ListParams{PrincipalScopeHash: repeatHex("a"), Limit: 3, After: after})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if len(page) < 3 {
			break
		}
		last := page[len(page)-1]
		after = &pg.PageKey{CreatedAt: last.CreatedAt, JobID: last.JobID}
	}
	if len(all) != 7 {
		t.Fatalf("%d jobs", len(all))
	}
	for i := 1; i < len(all); i++ {
		a, b := all[i-1], all[i]
		if a.CreatedAt.Before(b.CreatedAt) || (a.CreatedAt.Equal(b.CreatedAt) && a.JobID.String() < b.JobID.String()) {
			t.Fatalf("order broken at %d", i)
		}
	}
	none, err := pg.ListJobs(ctx, pool, pg.ListParams{PrincipalScopeHash: repeatHex("a"), Status: pg.StatusRunning, Limit: 10})
	if err != nil || len(none) != 0 {
		t.Fatalf("status filter: %d %v", len(none), err)
	}
}

func TestClaimLedgerEntry(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	e := pg.LedgerEntry{PrincipalScopeHash: repeatHex("a"), IdempotencyKeyHash: repeatHex("b"), RequestDigest: repeatHex("c"), ResponseText: "Processed: x"}
	got, inserted, err := pg.ClaimLedgerEntry(ctx, pool, e)
	if err != nil || !inserted || got != e {
		t.Fatalf("first: %+v %v %v", got, inserted, err)
	}
	other := e
	other.RequestDigest, other.ResponseText = repeatHex("d"), "other"
	got, inserted, err = pg.ClaimLedgerEntry(ctx, pool, other)
	if err != nil || inserted || got.RequestDigest != e.RequestDigest || got.ResponseText != e.ResponseText {
		t.Fatalf("second: %+v %v %v", got, inserted, err)
	}
}
