package pg_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

const testLeader = "retention"

// expireLeader moves the leader row's expiry into the past by the database
// clock: its holder "died" (or paused) past its term.
func expireLeader(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `UPDATE etl_maintenance_leader
		SET expires_at = clock_timestamp() - interval '1 millisecond' WHERE leader_name = $1`, testLeader); err != nil {
		t.Fatal(err)
	}
}

func leaderHolder(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var holder string
	err := pool.QueryRow(context.Background(), `SELECT holder_id FROM etl_maintenance_leader WHERE leader_name = $1`, testLeader).Scan(&holder)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return holder
}

// One row, one holder: a second process is denied while the term runs,
// takes it once the term expired (a fresh token), and the first one's
// renewal then fails; a resign frees the row at once.
func TestMaintenanceLeadershipTakeRenewExpireResign(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	const ttl = time.Hour

	a, held, err := pg.TakeLeadership(ctx, pool, testLeader, "worker-a", ttl)
	if err != nil || !held || a.Token == uuid.Nil {
		t.Fatalf("a takes an empty row: %+v %v %v", a, held, err)
	}
	if _, held, err := pg.TakeLeadership(ctx, pool, testLeader, "worker-b", ttl); err != nil || held {
		t.Fatalf("b takes a live row: %v %v", held, err)
	}
	if ok, err := pg.RenewLeadership(ctx, pool, a, ttl); err != nil || !ok {
		t.Fatalf("a renews: %v %v", ok, err)
	}
	if leaderHolder(t, pool) != "worker-a" {
		t.Fatal("row not held by a")
	}

	expireLeader(t, pool) // a dies
	b, held, err := pg.TakeLeadership(ctx, pool, testLeader, "worker-b", ttl)
	if err != nil || !held || b.Token == a.Token {
		t.Fatalf("b takes the expired row: %+v %v %v", b, held, err)
	}
	if ok, err := pg.RenewLeadership(ctx, pool, a, ttl); err != nil || ok {
		t.Fatalf("a renews b's term: %v %v", ok, err)
	}
	if err := pg.ResignLeadership(ctx, pool, a); err != nil || leaderHolder(t, pool) != "worker-b" {
		t.Fatalf("a's resign removed b's row: %v", err)
	}

	// A holder restarted under its id takes its own live row (a new term).
	b2, held, err := pg.TakeLeadership(ctx, pool, testLeader, "worker-b", ttl)
	if err != nil || !held || b2.Token == b.Token {
		t.Fatalf("b takes its own row again: %+v %v %v", b2, held, err)
	}
	if ok, err := pg.RenewLeadership(ctx, pool, b, ttl); err != nil || ok {
		t.Fatalf("b's old term renews: %v %v", ok, err)
	}
	if err := pg.ResignLeadership(ctx, pool, b2); err != nil || leaderHolder(t, pool) != "" {
		t.Fatalf("resign: %v, holder %q", err, leaderHolder(t, pool))
	}
	if _, held, err := pg.TakeLeadership(ctx, pool, testLeader, "worker-a", ttl); err != nil || !held {
		t.Fatalf("a takes the resigned row: %v %v", held, err)
	}
	if _, _, err := pg.TakeLeadership(ctx, pool, testLeader, "worker-a", 0); err == nil {
		t.Fatal("a zero term accepted")
	}
}

// A paused holder whose term expired and was taken runs a batch with its
// stale token: the fence refuses, zero rows go, and the error says
// ErrNotLeader. An expired term nobody took is refused too.
func TestFencedPruneOfAStaleTermDeletesNothing(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO etl_outbox_events (event_kind, job_record_id, job_status, attempt_count, occurred_at)
		SELECT 'job_lifecycle', gen_random_uuid(), 'SUCCEEDED', 1, clock_timestamp() - interval '40 days' FROM generate_series(1, 5)`); err != nil {
		t.Fatal(err)
	}
	a, _, err := pg.TakeLeadership(ctx, pool, testLeader, "worker-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	expireLeader(t, pool)
	stale := pg.FencedPrune{Term: a, TTL: time.Hour}
	n, err := stale.Prune(ctx, pool, pg.PruneKindOutbox, 720*time.Hour, 2)
	if !errors.Is(err, pg.ErrNotLeader) || n != 0 {
		t.Fatalf("expired term: pruned %d, %v; want 0 and ErrNotLeader", n, err)
	}
	b, held, err := pg.TakeLeadership(ctx, pool, testLeader, "worker-b", time.Hour)
	if err != nil || !held {
		t.Fatal(held, err)
	}
	for _, kind := range pg.PruneKinds {
		n, err := stale.Prune(ctx, pool, kind, 720*time.Hour, 2)
		if !errors.Is(err, pg.ErrNotLeader) || n != 0 {
			t.Fatalf("%s with a taken term: pruned %d, %v; want 0 and ErrNotLeader", kind, n, err)
		}
	}
	if left := pgtest.Count(t, pool, `SELECT count(*) FROM etl_outbox_events`); left != 5 {
		t.Fatalf("the stale holder deleted %d outbox rows", 5-left)
	}
	if n, err := (pg.FencedPrune{Term: b, TTL: time.Hour}).Prune(ctx, pool, pg.PruneKindOutbox, 720*time.Hour, 2); err != nil || n != 5 {
		t.Fatalf("the holder prunes: %d %v", n, err)
	}
}

// A batch holds the leadership row from its fence to its commit. A take
// that arrives while the term is live by its last committed renewal is
// denied at once, without waiting. One that arrives after that renewal's
// expiry (the holder paused in its batch past it) waits for the batch's
// commit and only then re-reads the row: it takes it only if the holder's
// term is over then too. So a batch and a take never overlap.
func TestTakeWaitsForTheRunningFencedBatch(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, _, err := pg.TakeLeadership(ctx, pool, testLeader, "worker-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	fence := func(tx pgx.Tx) bool {
		t.Helper()
		tag, err := tx.Exec(ctx, pg.FenceLeadershipSQL, a.Name, a.Holder, a.Token, time.Hour.Microseconds())
		if err != nil {
			t.Fatal(err)
		}
		return tag.RowsAffected() == 1
	}

	// A live term: denied at once while the batch runs.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !fence(tx) {
		t.Fatal("fence of a live term refused")
	}
	if _, held, err := pg.TakeLeadership(ctx, pool, testLeader, "worker-b", time.Hour); err != nil || held {
		t.Fatalf("take during a live term's batch: %v %v", held, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// The committed term runs out while the batch runs: renew it for a
	// short term, fence before it ends (again if the machine was too slow),
	// then wait for the database clock to pass it.
	const short = 2 * time.Second
	for attempt := 1; ; attempt++ {
		if ok, err := pg.RenewLeadership(ctx, pool, a, short); err != nil || !ok {
			t.Fatal(ok, err)
		}
		if tx, err = pool.Begin(ctx); err != nil {
			t.Fatal(err)
		}
		if fence(tx) {
			break
		}
		_ = tx.Rollback(ctx)
		if attempt == 10 {
			t.Fatal("could not fence within a 2 s term ten times")
		}
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	testwait.For(t, 30*time.Second, "the committed term to expire by the database clock", func() bool {
		var over bool
		if err := pool.QueryRow(ctx, `SELECT expires_at < clock_timestamp() FROM etl_maintenance_leader`).Scan(&over); err != nil {
			t.Fatal(err)
		}
		return over
	})
	// The holder stays paused past the term its fence extended, too.
	if _, err := tx.Exec(ctx, `UPDATE etl_maintenance_leader SET expires_at = clock_timestamp() - interval '1 millisecond'`); err != nil {
		t.Fatal(err)
	}
	type result struct {
		held bool
		err  error
	}
	took := make(chan result, 1)
	go func() {
		_, held, err := pg.TakeLeadership(ctx, pool, testLeader, "worker-b", time.Hour)
		took <- result{held, err}
	}()
	pgtest.WaitForLockWait(t, pool, "\nWITH live AS")
	select {
	case r := <-took:
		t.Fatalf("the take returned while the batch ran: %+v", r)
	default:
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-took; r.err != nil || !r.held {
		t.Fatalf("the take after the batch committed: %+v", r)
	}
	if leaderHolder(t, pool) != "worker-b" {
		t.Fatal("b does not hold the row")
	}
}

// retentionFixture writes, in a migrated database, rows of every kind of
// retention on both sides of the windows of retentionWindows (the prune
// tests' fixtures: a replay chain with a young member and an old source of
// a pending replay, which stay; old terminal jobs, which go; ledger, outbox
// and audit rows by age; a claim-queue row without a job). survivors lists
// what is left by label.
func retentionFixture(t *testing.T, pool *pgxpool.Pool) (labels map[uuid.UUID]string) {
	t.Helper()
	ctx := context.Background()
	labels = map[uuid.UUID]string{}
	scope := repeatHex("a")
	const payload = `[{"id":"m"}]`
	old := 40 * 24 * time.Hour

	root := failedJob(t, pool, scope, payload)
	age(t, pool, root, old)
	gen1, err := replay(pool, scope, root, "chain-1", payload)
	if err != nil {
		t.Fatal(err)
	}
	setTerminal(t, pool, gen1.Job.JobID, pg.StatusFailed)
	age(t, pool, gen1.Job.JobID, old)
	gen2, err := replay(pool, scope, gen1.Job.JobID, "chain-2", payload)
	if err != nil {
		t.Fatal(err)
	}
	setTerminal(t, pool, gen2.Job.JobID, pg.StatusSucceeded)
	labels[root], labels[gen1.Job.JobID], labels[gen2.Job.JobID] = "chain-root", "chain-gen1", "chain-gen2-young"

	busy := failedJob(t, pool, scope, payload)
	age(t, pool, busy, old)
	busyReplay, err := replay(pool, scope, busy, "busy-1", payload)
	if err != nil {
		t.Fatal(err)
	}
	age(t, pool, busyReplay.Job.JobID, old)
	labels[busy], labels[busyReplay.Job.JobID] = "busy-source", "busy-replay-pending"

	for i := range 5 {
		id := pgtest.InsertJobs(t, pool, pg.NewJob{PrincipalScopeHash: scope, Payload: payload})[0]
		setTerminal(t, pool, id, []string{pg.StatusFailed, pg.StatusSucceeded}[i%2])
		age(t, pool, id, old)
		labels[id] = fmt.Sprint("old-terminal-", i)
	}
	for i := range 2 {
		id := failedJob(t, pool, scope, payload)
		age(t, pool, id, 29*24*time.Hour)
		labels[id] = fmt.Sprint("young-terminal-", i)
	}
	pending := pgtest.InsertJobs(t, pool, pg.NewJob{PrincipalScopeHash: scope, Payload: payload})[0]
	age(t, pool, pending, old)
	labels[pending] = "old-pending"

	for i := range 5 {
		if _, _, err := pg.ClaimLedgerEntry(ctx, pool, pg.LedgerEntry{PrincipalScopeHash: scope,
			IdempotencyKeyHash: pgtest.SHA(fmt.Sprint("k", i)), RequestDigest: repeatHex("d"), ResponseText: "Processed: x\n"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE etl_idempotency_records SET created_at = clock_timestamp() - interval '40 days'
		WHERE idempotency_key_hash = ANY($1)`, []string{pgtest.SHA("k0"), pgtest.SHA("k1"), pgtest.SHA("k2")}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO etl_outbox_events (event_kind, job_record_id, job_status, attempt_count, occurred_at)
		SELECT 'job_lifecycle', gen_random_uuid(), 'SUCCEEDED', g,
		       clock_timestamp() - CASE WHEN g <= 3 THEN interval '8 days' ELSE interval '1 hour' END
		FROM generate_series(1, 5) g`); err != nil {
		t.Fatal(err)
	}
	op := pgtest.SHA("maintenance-operator")
	for _, a := range []string{"100 days", "91 days", "89 days", "1 hour"} {
		id := uuid.New()
		if _, err := pg.OperatorCancelJob(ctx, pool, pg.OperatorCancelParams{JobID: id, OperatorScopeHash: op,
			CancellationKeyHash: pgtest.SHA(id.String())}); !errors.Is(err, pg.ErrNotFound) {
			t.Fatal(err)
		}
		if err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `UPDATE etl_operator_audit_records SET created_at = created_at - $2::interval
				WHERE job_record_id = $1`, id, a)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		labels[id] = "audit-" + a
	}
	if _, err := pool.Exec(ctx, `INSERT INTO etl_job_claim_queue (job_record_id, claimable_at) VALUES ($1, clock_timestamp())`, uuid.New()); err != nil {
		t.Fatal(err)
	}
	return labels
}

// retentionWindows are the fixture's windows: outbox a week, jobs and
// ledger 30 days, audit 90 days.
var retentionWindows = map[pg.PruneKind]time.Duration{
	pg.PruneKindTerminalJobs: 720 * time.Hour,
	pg.PruneKindLedger:       720 * time.Hour,
	pg.PruneKindOutbox:       168 * time.Hour,
	pg.PruneKindAudit:        2160 * time.Hour,
}

// survivors lists the rows left in every table retention touches, one
// label each, sorted: jobs and audit rows by their fixture label, ledger
// rows by count of age, outbox rows by kind and attempt, queue rows by
// whether their job exists.
func survivors(t *testing.T, pool *pgxpool.Pool, labels map[uuid.UUID]string) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	collect := func(prefix, query string) {
		rows, err := pool.Query(ctx, query)
		if err != nil {
			t.Fatal(err)
		}
		vals, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vals {
			out = append(out, prefix+v)
		}
	}
	ids := func(prefix, query string) {
		rows, err := pool.Query(ctx, query)
		if err != nil {
			t.Fatal(err)
		}
		vals, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range vals {
			out = append(out, prefix+cmp.Or(labels[id], "unlabelled"))
		}
	}
	ids("job:", `SELECT job_record_id FROM etl_job_records`)
	ids("audit:", `SELECT job_record_id FROM etl_operator_audit_records`)
	collect("ledger:", `SELECT CASE WHEN created_at < clock_timestamp() - interval '30 days' THEN 'old' ELSE 'young' END FROM etl_idempotency_records`)
	collect("outbox:", `SELECT event_kind || '-' || coalesce(attempt_count::text, '') FROM etl_outbox_events`)
	collect("queue:", `SELECT CASE WHEN EXISTS (SELECT 1 FROM etl_job_records j WHERE j.job_record_id = q.job_record_id)
		THEN 'job' ELSE 'orphan' END FROM etl_job_claim_queue q`)
	slices.Sort(out)
	return out
}

// The fenced batches of the elected maintainer delete exactly what `etlctl
// prune` deletes (its functions, unfenced) on the same fixture, batch by
// batch of 2, and nothing more: the survivors of both databases are equal,
// and are the fixture's kept rows.
func TestFencedPruneDeletesWhatPruneDeletes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	byPrune, _ := pgtest.NewDatabase(t)
	byLeader, _ := pgtest.NewDatabase(t)
	pruneLabels := retentionFixture(t, byPrune)
	leaderLabels := retentionFixture(t, byLeader)

	const batch = 2
	for kind, f := range map[pg.PruneKind]func() (int64, error){
		pg.PruneKindTerminalJobs: func() (int64, error) {
			return pg.PruneTerminalJobs(ctx, byPrune, retentionWindows[pg.PruneKindTerminalJobs], batch)
		},
		pg.PruneKindLedger: func() (int64, error) {
			return pg.PruneLedger(ctx, byPrune, retentionWindows[pg.PruneKindLedger], batch)
		},
		pg.PruneKindOrphanQueue: func() (int64, error) { return pg.PruneOrphanQueueRows(ctx, byPrune) },
		pg.PruneKindOutbox: func() (int64, error) {
			return pg.PruneOutbox(ctx, byPrune, retentionWindows[pg.PruneKindOutbox], batch)
		},
		pg.PruneKindAudit: func() (int64, error) {
			return pg.PruneOperatorAudit(ctx, byPrune, retentionWindows[pg.PruneKindAudit], batch)
		},
	} {
		if _, err := f(); err != nil {
			t.Fatalf("prune %s: %v", kind, err)
		}
	}

	term, held, err := pg.TakeLeadership(ctx, byLeader, testLeader, "worker-a", time.Hour)
	if err != nil || !held {
		t.Fatal(held, err)
	}
	fenced := pg.FencedPrune{Term: term, TTL: time.Hour, StatementTimeout: time.Minute}
	deleted := map[pg.PruneKind]int64{}
	for _, kind := range pg.PruneKinds {
		n, err := fenced.Prune(ctx, byLeader, kind, retentionWindows[kind], batch)
		if err != nil {
			t.Fatalf("fenced %s: %v", kind, err)
		}
		deleted[kind] = n
	}

	want := []string{
		"audit:audit-1 hour", "audit:audit-89 days",
		"job:busy-replay-pending", "job:busy-source", "job:chain-gen1", "job:chain-gen2-young", "job:chain-root",
		"job:old-pending", "job:young-terminal-0", "job:young-terminal-1",
		"ledger:young", "ledger:young",
		"outbox:job_lifecycle-4", "outbox:job_lifecycle-5",
	}
	got := survivors(t, byLeader, leaderLabels)
	// The fixture's jobs bring their own outbox and queue rows (young):
	// compare those by the prune database, the rest by the list.
	if fromPrune := survivors(t, byPrune, pruneLabels); !slices.Equal(got, fromPrune) {
		t.Fatalf("survivors differ:\n fenced %v\n prune  %v", got, fromPrune)
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("%s pruned", w)
		}
	}
	for _, s := range got {
		if s == "queue:orphan" || s == "ledger:old" || s == "outbox:job_lifecycle-1" || s == "audit:audit-100 days" ||
			strings.HasPrefix(s, "job:old-terminal") {
			t.Errorf("%s kept", s)
		}
	}
	if deleted[pg.PruneKindTerminalJobs] != 5 || deleted[pg.PruneKindLedger] != 3 || deleted[pg.PruneKindOrphanQueue] != 1 ||
		deleted[pg.PruneKindOutbox] != 3 || deleted[pg.PruneKindAudit] != 2 {
		t.Fatalf("deleted by kind: %v", deleted)
	}
}

// A fenced batch runs with its own statement timeout and the planner's
// defaults even on the worker's execution pool, whose sessions pin index
// plans, and only for its transaction: the session keeps its settings.
func TestFencedBatchSettingsHoldForItsTransactionOnly(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	pool, err := pg.NewPool(ctx, url, pg.PoolOptions{MaxConns: 1, PinnedPlans: true, StatementTimeout: 7 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	show := func(q pg.DBTX) (seqscan, plan, timeout string) {
		t.Helper()
		if err := q.QueryRow(ctx, `SELECT current_setting('enable_seqscan'), current_setting('plan_cache_mode'),
			current_setting('statement_timeout')`).Scan(&seqscan, &plan, &timeout); err != nil {
			t.Fatal(err)
		}
		return
	}
	err = pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, pg.MaintenanceSettingsSQL, "60000"); err != nil {
			return err
		}
		if s, p, to := show(tx); s != "on" || p != "auto" || to != "1min" {
			t.Errorf("in the batch: enable_seqscan %s, plan_cache_mode %s, statement_timeout %s", s, p, to)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, pg.MaintenanceSettingsSQL, ""); err != nil {
			return err
		}
		if _, _, to := show(tx); to != "7s" {
			t.Errorf("an unset batch timeout: statement_timeout %s, want the pool's 7s", to)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if s, p, to := show(pool); s != "off" || p != "force_generic_plan" || to != "7s" {
		t.Fatalf("after the batch: enable_seqscan %s, plan_cache_mode %s, statement_timeout %s", s, p, to)
	}
}
