package lease_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// diagnosticJob is a fixture diagnostic job that succeeds at once.
func diagnosticJob(maxAttempts int) pg.NewJob {
	return pg.NewJob{Kind: pg.KindDiagnostic, Payload: `{"durationMillis":0,"records":[]}`, MaxAttempts: maxAttempts}
}

// claimRace runs one claimer per pool, all released together by one barrier,
// each claiming batches of limit until a claim returns nothing. It returns
// every claim made, keyed by job, and fails the test on any job claimed twice.
func claimRace(t *testing.T, pools []*pgxpool.Pool, round, limit int) map[uuid.UUID]lease.Claim {
	t.Helper()
	ctx := context.Background()
	start := make(chan struct{})
	got := make([][]lease.Claim, len(pools))
	errs := make([]error, len(pools))
	var wg sync.WaitGroup
	for i, p := range pools {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("replica-%02d.round-%d", i, round)
			<-start
			for range 10_000 { // bound: far more batches than jobs
				res, err := lease.ClaimJobs(ctx, p, lease.ClaimParams{OwnerID: owner, Limit: limit, LeaseDuration: time.Hour})
				if err != nil {
					errs[i] = err
					return
				}
				if len(res.Claimed) > limit {
					errs[i] = fmt.Errorf("claimed %d jobs with limit %d", len(res.Claimed), limit)
					return
				}
				if res.Exhausted != 0 {
					errs[i] = fmt.Errorf("unexpected exhausted jobs: %d", res.Exhausted)
					return
				}
				if len(res.Claimed) == 0 {
					return
				}
				got[i] = append(got[i], res.Claimed...)
			}
			errs[i] = errors.New("claimer did not run dry")
		}()
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	all := map[uuid.UUID]lease.Claim{}
	perClaimer := make([]int, len(pools))
	tokens := map[int64]uuid.UUID{}
	for i, cs := range got {
		perClaimer[i] = len(cs)
		for _, c := range cs {
			if prev, dup := all[c.JobID]; dup {
				t.Fatalf("job %s claimed twice in round %d: by %s (token %d) and %s (token %d)",
					c.JobID, round, prev.OwnerID, prev.FencingToken, c.OwnerID, c.FencingToken)
			}
			if other, dup := tokens[c.FencingToken]; dup {
				t.Fatalf("fencing token %d issued to jobs %s and %s", c.FencingToken, other, c.JobID)
			}
			all[c.JobID], tokens[c.FencingToken] = c, c.JobID
		}
	}
	t.Logf("round %d: jobs per claimer %v", round, perClaimer)
	return all
}

// concAssertLeasesMatch checks that the database holds exactly the leases
// the claimers were told they have.
func concAssertLeasesMatch(t *testing.T, pool *pgxpool.Pool, claims map[uuid.UUID]lease.Claim) {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT job_record_id, job_status, lease_claim_id, lease_owner_id,
		lease_fencing_token, lease_expires_at, attempt_count FROM etl_job_records`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var (
			id, claimID uuid.UUID
			status      string
			owner       string
			token       int64
			expires     time.Time
			attempt     int
		)
		if err := rows.Scan(&id, &status, &claimID, &owner, &token, &expires, &attempt); err != nil {
			t.Fatal(err)
		}
		n++
		c, ok := claims[id]
		if !ok {
			t.Fatalf("job %s (%s) not claimed by anyone", id, status)
		}
		if status != pg.StatusRunning || claimID != c.ClaimID || owner != c.OwnerID || token != c.FencingToken ||
			!expires.Equal(c.ExpiresAt) || attempt != c.Attempt {
			t.Fatalf("job %s: database lease (%s %s %s %d %v attempt %d) differs from the claim %+v",
				id, status, claimID, owner, token, expires, attempt, c)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(claims) {
		t.Fatalf("database has %d jobs, claims %d", n, len(claims))
	}
}

func TestTwoReplicasCannotBothObtainALiveClaim(t *testing.T) {
	t.Parallel()
	const (
		jobs     = 200
		claimers = 8
		limit    = 5
	)
	pool, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	ids := pgtest.InsertN(t, pool, jobs, diagnosticJob(3))
	pools := make([]*pgxpool.Pool, claimers)
	for i := range pools {
		pools[i] = pgtest.NewPool(t, url, 2) // a separate pool per replica
	}

	first := claimRace(t, pools, 1, limit)
	if len(first) != jobs {
		t.Fatalf("round 1 claimed %d distinct jobs, want %d", len(first), jobs)
	}
	for _, id := range ids {
		c, ok := first[id]
		if !ok {
			t.Fatalf("job %s never claimed", id)
		}
		if c.Attempt != 1 {
			t.Fatalf("job %s attempt %d, want 1", id, c.Attempt)
		}
	}
	concAssertLeasesMatch(t, pool, first)

	// Expire every lease by the database clock; nobody finished anything.
	if n := pgtest.ExpireAllLeases(t, pool); n != jobs {
		t.Fatalf("expired %d leases, want %d", n, jobs)
	}

	second := claimRace(t, pools, 2, limit)
	if len(second) != jobs {
		t.Fatalf("round 2 reclaimed %d distinct jobs, want %d", len(second), jobs)
	}
	var maxFirst, minSecond int64 = 0, 1<<63 - 1
	for _, id := range ids {
		old, nu := first[id], second[id]
		if nu.FencingToken <= old.FencingToken {
			t.Fatalf("job %s: reclaim token %d not greater than %d", id, nu.FencingToken, old.FencingToken)
		}
		if nu.Attempt != 2 {
			t.Fatalf("job %s: reclaim attempt %d, want 2", id, nu.Attempt)
		}
		if nu.ClaimID == old.ClaimID {
			t.Fatalf("job %s: reclaim reused claim id", id)
		}
		maxFirst, minSecond = max(maxFirst, old.FencingToken), min(minSecond, nu.FencingToken)
	}
	if minSecond <= maxFirst {
		t.Fatalf("round 2 token %d not above every round 1 token (max %d)", minSecond, maxFirst)
	}
	concAssertLeasesMatch(t, pool, second)

	// The superseded round-1 leases are fenced: none of them can finish.
	byOwner := map[string][]lease.Ref{}
	for _, c := range first {
		byOwner[c.OwnerID] = append(byOwner[c.OwnerID], c.Ref)
	}
	for owner, refs := range byOwner {
		err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
			won, err := lease.Succeed(ctx, tx, owner, refs)
			if err != nil {
				return err
			}
			if len(won) != 0 {
				return fmt.Errorf("%d superseded leases of %s succeeded", len(won), owner)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records WHERE job_status <> 'RUNNING'`); n != 0 {
		t.Fatalf("%d jobs moved out of RUNNING by stale finishes", n)
	}
}

type concLeaseRow struct {
	status    string
	claimID   *uuid.UUID
	owner     *string
	token     *int64
	expires   *time.Time
	attempt   int
	updatedAt time.Time
	failure   *string
}

func concReadLease(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) concLeaseRow {
	t.Helper()
	var r concLeaseRow
	if err := pool.QueryRow(context.Background(), `SELECT job_status, lease_claim_id, lease_owner_id, lease_fencing_token,
		lease_expires_at, attempt_count, updated_at, failure_code FROM etl_job_records WHERE job_record_id = $1`, id).
		Scan(&r.status, &r.claimID, &r.owner, &r.token, &r.expires, &r.attempt, &r.updatedAt, &r.failure); err != nil {
		t.Fatal(err)
	}
	return r
}

// An expired lease has lost its authority by itself: with no other worker
// involved, no fenced write of its holder matches.
func TestExpiredLeaseCannotWriteEvenUnclaimed(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	pgtest.InsertN(t, pool, 5, diagnosticJob(3))
	const owner = "replica-expired-01"
	res, err := lease.ClaimJobs(ctx, pool, lease.ClaimParams{OwnerID: owner, Limit: 5, LeaseDuration: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Claimed) != 5 {
		t.Fatalf("claimed %d, want 5", len(res.Claimed))
	}
	pgtest.ExpireAllLeases(t, pool)
	before := map[uuid.UUID]concLeaseRow{}
	for _, c := range res.Claimed {
		before[c.JobID] = concReadLease(t, pool, c.JobID)
	}
	outboxBefore := pgtest.Count(t, pool, `SELECT count(*) FROM etl_outbox_events`)

	c := res.Claimed
	t.Run("renew", func(t *testing.T) {
		rs, err := lease.Renew(ctx, pool, owner, []lease.Ref{c[0].Ref}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != 1 || rs[0].Renewed {
			t.Fatalf("expired lease renewed: %+v", rs)
		}
	})
	t.Run("retry", func(t *testing.T) {
		if err := lease.Retry(ctx, pool, c[1].Ref, 0); !errors.Is(err, lease.ErrLost) {
			t.Fatalf("retry of expired lease: %v, want ErrLost", err)
		}
	})
	t.Run("fail", func(t *testing.T) {
		if err := lease.Fail(ctx, pool, c[2].Ref, "etl_handler_failed"); !errors.Is(err, lease.ErrLost) {
			t.Fatalf("fail of expired lease: %v, want ErrLost", err)
		}
	})
	t.Run("release", func(t *testing.T) {
		if err := lease.Release(ctx, pool, c[3].Ref); !errors.Is(err, lease.ErrLost) {
			t.Fatalf("release of expired lease: %v, want ErrLost", err)
		}
	})
	t.Run("succeed", func(t *testing.T) {
		err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
			_, err := pgtest.SucceedOne(ctx, tx, c[4].Ref)
			return err
		})
		if !errors.Is(err, lease.ErrLost) {
			t.Fatalf("succeed of expired lease: %v, want ErrLost", err)
		}
		// Every one of the expired leases at once, too.
		refs := make([]lease.Ref, len(c))
		for i := range c {
			refs[i] = c[i].Ref
		}
		err = pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
			won, err := lease.Succeed(ctx, tx, owner, refs)
			if err == nil && len(won) != 0 {
				err = fmt.Errorf("%d expired leases succeeded", len(won))
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	// Nothing changed: same rows, same leases, no events.
	for id, b := range before {
		a := concReadLease(t, pool, id)
		if a.status != b.status || *a.claimID != *b.claimID || *a.token != *b.token || !a.expires.Equal(*b.expires) ||
			a.attempt != b.attempt || !a.updatedAt.Equal(b.updatedAt) || a.failure != nil {
			t.Fatalf("job %s changed by a write under an expired lease: %+v -> %+v", id, b, a)
		}
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_outbox_events`); n != outboxBefore {
		t.Fatalf("outbox grew from %d to %d under expired leases", outboxBefore, n)
	}

	// The next claim takes them over with a new attempt and greater tokens.
	next, err := lease.ClaimJobs(ctx, pool, lease.ClaimParams{OwnerID: "replica-expired-02", Limit: 10, LeaseDuration: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if len(next.Claimed) != 5 {
		t.Fatalf("reclaimed %d, want 5", len(next.Claimed))
	}
	for _, nc := range next.Claimed {
		if nc.Attempt != 2 || nc.FencingToken <= *before[nc.JobID].token {
			t.Fatalf("reclaim of %s: attempt %d token %d (old token %d)", nc.JobID, nc.Attempt, nc.FencingToken, *before[nc.JobID].token)
		}
	}
}

// Lease expiry is the database clock plus the duration.
func TestLeaseTimeComesFromDatabaseClock(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	pgtest.InsertN(t, pool, 2, diagnosticJob(3))
	const owner = "replica-clock-01"
	res, err := lease.ClaimJobs(ctx, pool, lease.ClaimParams{OwnerID: owner, Limit: 1, LeaseDuration: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Claimed) != 1 {
		t.Fatalf("claimed %d, want 1", len(res.Claimed))
	}
	c := res.Claimed[0]

	remaining := func(col string) (time.Duration, time.Time) {
		t.Helper()
		var secs float64
		var at time.Time
		if err := pool.QueryRow(ctx, `SELECT extract(epoch FROM `+col+` - clock_timestamp())::float8, `+col+`
			FROM etl_job_records WHERE job_record_id = $1`, c.JobID).Scan(&secs, &at); err != nil {
			t.Fatal(err)
		}
		return time.Duration(secs * float64(time.Second)), at
	}
	inHour := func(what string, d, want time.Duration) {
		t.Helper()
		if d < want-time.Minute || d > want+time.Minute {
			t.Fatalf("%s: %v left by the database clock, want about %v", what, d, want)
		}
	}
	left, at := remaining("lease_expires_at")
	inHour("claim", left, time.Hour)
	if !at.Equal(c.ExpiresAt) {
		t.Fatalf("claim reported expiry %v, database holds %v", c.ExpiresAt, at)
	}

	rs, err := lease.Renew(ctx, pool, owner, []lease.Ref{c.Ref}, 2*time.Hour)
	if err != nil || len(rs) != 1 || !rs[0].Renewed {
		t.Fatalf("renew: %+v %v", rs, err)
	}
	left, at = remaining("lease_expires_at")
	inHour("renew", left, 2*time.Hour)
	if !at.Equal(rs[0].ExpiresAt) {
		t.Fatalf("renew reported expiry %v, database holds %v", rs[0].ExpiresAt, at)
	}

	if err := lease.Retry(ctx, pool, c.Ref, time.Hour); err != nil {
		t.Fatal(err)
	}
	left, _ = remaining("available_at")
	inHour("retry backoff", left, time.Hour)

	// Inside a transaction that began earlier, the claim still reads the
	// current database clock, not now() (frozen at transaction start): after
	// the database clock has advanced by pg_sleep, the expiry lies at least
	// that far beyond now() + duration.
	err = pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT now(), pg_sleep(0.05)`); err != nil {
			return err
		}
		res, err := lease.ClaimJobs(ctx, tx, lease.ClaimParams{OwnerID: owner, Limit: 1, LeaseDuration: time.Hour})
		if err != nil {
			return err
		}
		if len(res.Claimed) != 1 {
			return fmt.Errorf("claimed %d in transaction, want 1", len(res.Claimed))
		}
		var beyondNow, notFuture bool
		if err := tx.QueryRow(ctx, `SELECT lease_expires_at >= now() + interval '1 hour 50 milliseconds',
			lease_expires_at <= clock_timestamp() + interval '1 hour'
			FROM etl_job_records WHERE job_record_id = $1`, res.Claimed[0].JobID).Scan(&beyondNow, &notFuture); err != nil {
			return err
		}
		if !beyondNow || !notFuture {
			return fmt.Errorf("expiry inside a transaction not from clock_timestamp(): beyond now()+1h50ms %v, within clock+1h %v", beyondNow, notFuture)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// No lease statement reads a transaction-frozen or host clock, and none
// takes a timestamp parameter: the SQL text (the string literals of
// lease.go, comments excluded) uses clock_timestamp() only, and the Go code
// never calls time.Now.
func TestLeaseSQLUsesOnlyTheDatabaseClock(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "lease.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var sql strings.Builder
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BasicLit:
			if n.Kind == token.STRING {
				s, err := strconv.Unquote(n.Value)
				if err != nil {
					t.Fatalf("%s: %v", fset.Position(n.Pos()), err)
				}
				sql.WriteString(s)
				sql.WriteString("\n")
			}
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok && x.Name == "time" && (n.Sel.Name == "Now" || n.Sel.Name == "Since" || n.Sel.Name == "Until") {
				t.Errorf("%s: lease.go reads the host clock (time.%s)", fset.Position(n.Pos()), n.Sel.Name)
			}
		}
		return true
	})
	text := sql.String()
	if !strings.Contains(text, "clock_timestamp()") {
		t.Fatal("lease SQL never uses clock_timestamp()")
	}
	for _, forbidden := range []string{`(?i)\bnow\s*\(`, `(?i)\bcurrent_timestamp\b`, `(?i)\btransaction_timestamp\b`,
		`(?i)\bstatement_timestamp\b`, `(?i)\blocaltimestamp\b`, `(?i)\bcurrent_time\b`, `(?i)'now'`,
		`(?i)\$\d+\s*::\s*timestamp`, `(?i)\$\d+\s*::\s*date\b`} {
		if loc := regexp.MustCompile(forbidden).FindStringIndex(text); loc != nil {
			t.Errorf("lease SQL matches %s: %q", forbidden, text[max(0, loc[0]-40):min(len(text), loc[1]+40)])
		}
	}
	// Every lease_expires_at / available_at assignment clears it or is
	// clock_timestamp() based.
	assignments := regexp.MustCompile(`(?m)(lease_expires_at|available_at)\s*=\s*([^\n]+)`).FindAllStringSubmatch(text, -1)
	if len(assignments) < 3 { // claim, renew, retry at least
		t.Fatalf("found only %d lease time assignments in lease.go", len(assignments))
	}
	for _, m := range assignments {
		if v := strings.TrimSpace(m[2]); !strings.HasPrefix(v, "NULL") && !strings.Contains(v, "clock_timestamp()") {
			t.Errorf("assignment %q not from clock_timestamp()", m[0])
		}
	}
}
