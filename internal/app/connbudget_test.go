package app

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/natstest"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

// fleetServerBudget is the server connections docs/operations/connections.md
// gives a fleet of 8 workers and 2 intakes at the defaults: PostgreSQL's
// default max_connections (100) less 10 kept for superuser_reserved_connections
// (3), a migration (2), one etlctl command (2), monitoring (2) and an
// operator's psql (1).
const fleetServerBudget = 90

func loadWorker(t *testing.T, env map[string]string) config.Worker {
	t.Helper()
	cfg, _, err := config.LoadWorker(nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func loadIntake(t *testing.T, env map[string]string) config.Intake {
	t.Helper()
	cfg, _, err := config.LoadIntake(nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// maxConns is what pgxpool will hold at most on the pool.
func maxConns(p *pgxpool.Pool) int { return int(p.Config().MaxConns) }

// budgetLog is the one "database connection budget" line in a JSON log.
func budgetLog(t *testing.T, log string) map[string]any {
	t.Helper()
	var found map[string]any
	for line := range strings.SplitSeq(log, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m["msg"] != "database connection budget" {
			continue
		}
		if found != nil {
			t.Fatalf("two budget lines:\n%s", log)
		}
		found = m
	}
	if found == nil {
		t.Fatalf("no budget line:\n%s", log)
	}
	if strings.Contains(log, "postgres://") {
		t.Fatalf("the log holds a database URL:\n%s", log)
	}
	return found
}

// TestWorkerConnBudgetIsThePools: the budget a worker process states (and
// logs) is the sum of its real pools' pgxpool MaxConns, pool by pool, with
// the default execution pool and a configured one, whatever the slots.
func TestWorkerConnBudgetIsThePools(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDatabase(t)
	for _, tc := range []struct {
		name      string
		env       map[string]string
		wantTotal int
	}{
		{"defaults", map[string]string{}, config.DefaultWorkerPoolSize + 2},
		{"pool size 3, 2000 slots", map[string]string{"MIGHTYETL_WORKER_POOL_SIZE": "3", "MIGHTYETL_WORKER_CONCURRENCY": "2000"}, 5},
		{"pool size 40, 1 slot", map[string]string{"MIGHTYETL_WORKER_POOL_SIZE": "40", "MIGHTYETL_WORKER_CONCURRENCY": "1"}, 42},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.env["DATABASE_URL"] = url
			tc.env["MIGHTYETL_METRICS_ADDR"] = "127.0.0.1:0"
			cfg := loadWorker(t, tc.env)
			var log bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			p, err := NewWorkerProcess(ctx, cfg, nil, nil, slog.New(slog.NewJSONHandler(&log, nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = p.Stop(context.Background()) }()
			b := WorkerConnBudget(cfg)
			if got, want := maxConns(p.exec), b.Get("exec"); got != want {
				t.Errorf("execution pool MaxConns %d, budget %d", got, want)
			}
			if got, want := maxConns(p.renew), b.Get("renew"); got != want {
				t.Errorf("renewal pool MaxConns %d, budget %d", got, want)
			}
			if sum := maxConns(p.exec) + maxConns(p.renew); sum != b.Total() || b.Total() != tc.wantTotal {
				t.Errorf("pools sum to %d, budget says %d, want %d", sum, b.Total(), tc.wantTotal)
			}
			line := budgetLog(t, log.String())
			if got := line["max_server_connections"]; got != float64(tc.wantTotal) {
				t.Errorf("logged max_server_connections %v, want %d", got, tc.wantTotal)
			}
			pools, _ := line["pools"].(map[string]any)
			if pools["exec"] != float64(maxConns(p.exec)) || pools["renew"] != float64(maxConns(p.renew)) {
				t.Errorf("logged pools %v, want exec %d renew %d", pools, maxConns(p.exec), maxConns(p.renew))
			}
		})
	}
}

// TestIntakeConnBudgetIsThePools: the intake's budget is the sum of its
// three real pools' MaxConns, plus the outbox relay's one LISTEN
// connection when NATS is configured: a started intake with NATS holds
// exactly one listening backend.
func TestIntakeConnBudgetIsThePools(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDatabase(t)
	natsURL := natstest.URL(t)
	for _, tc := range []struct {
		name      string
		env       map[string]string
		wantTotal int
	}{
		{"defaults, no NATS", map[string]string{}, config.DefaultIntakePoolSize + 3},
		{"defaults, NATS", map[string]string{"NATS_URL": natsURL}, config.DefaultIntakePoolSize + 4},
		{"pool size 5, NATS", map[string]string{"NATS_URL": natsURL, "MIGHTYETL_INTAKE_POOL_SIZE": "5"}, 9},
		// Behind a transaction pooler the relay LISTENs only on a direct URL.
		{"pooler, no direct URL, NATS", map[string]string{"NATS_URL": natsURL, "MIGHTYETL_DATABASE_POOLER": "transaction"}, config.DefaultIntakePoolSize + 3},
		{"pooler, direct URL, NATS", map[string]string{"NATS_URL": natsURL, "MIGHTYETL_DATABASE_POOLER": "transaction", "MIGHTYETL_DATABASE_DIRECT_URL": url}, config.DefaultIntakePoolSize + 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.env["DATABASE_URL"] = url
			tc.env["MIGHTYETL_HTTP_ADDR"] = "127.0.0.1:0"
			if tc.env["NATS_URL"] != "" {
				tc.env["MIGHTYETL_NATS_SUBJECT_PREFIX"] = natstest.Prefix(t)
			}
			cfg := loadIntake(t, tc.env)
			pools := openTestPools(t, cfg)
			b := IntakeConnBudget(cfg)
			for _, p := range []struct {
				name string
				pool *pgxpool.Pool
			}{{"requests", pools.Requests}, {"health", pools.Health}, {"relay", pools.Relay}} {
				if got, want := maxConns(p.pool), b.Get(p.name); got != want {
					t.Errorf("%s pool MaxConns %d, budget %d", p.name, got, want)
				}
			}
			listen := 0
			if cfg.NATS.Enabled() {
				listen = listeningBackends(t, pools, cfg)
			}
			if got, want := listen, b.Get("relay_listen"); got != want {
				t.Errorf("%d LISTEN connections, budget %d", got, want)
			}
			sum := maxConns(pools.Requests) + maxConns(pools.Health) + maxConns(pools.Relay) + listen
			if sum != b.Total() || b.Total() != tc.wantTotal {
				t.Errorf("pools and LISTEN sum to %d, budget says %d, want %d", sum, b.Total(), tc.wantTotal)
			}
			var log bytes.Buffer
			LogConnBudget(slog.New(slog.NewJSONHandler(&log, nil)), b)
			if got := budgetLog(t, log.String())["max_server_connections"]; got != float64(tc.wantTotal) {
				t.Errorf("logged max_server_connections %v, want %d", got, tc.wantTotal)
			}
		})
	}
}

// listeningBackends starts the intake on pools, waits until its outbox
// relay listens (or, when it polls only, until it logged so), and returns
// how many backends of the database wait in LISTEN (the relay's connection
// is outside the pools).
func listeningBackends(t *testing.T, pools IntakePools, cfg config.Intake) int {
	t.Helper()
	var log syncBuffer
	in, err := NewIntake(cfg, pools, IntakeOptions{Name: "mightyetl-test", Logger: slog.New(slog.NewJSONHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := in.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = in.Stop(context.Background()) }()
	count := func() int {
		var n int
		if err := pools.Health.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query ILIKE 'listen %'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if strings.Contains(log.String(), "outbox relay polling only") {
		return count()
	}
	testwait.For(t, 20*time.Second, "the outbox relay to LISTEN", func() bool { return count() > 0 })
	return count()
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestFleetDefaultsFitTheBudget: 8 workers and 2 intakes (with NATS, the
// larger intake budget) at the defaults stay within fleetServerBudget.
func TestFleetDefaultsFitTheBudget(t *testing.T) {
	w := WorkerConnBudget(loadWorker(t, map[string]string{}))
	in := IntakeConnBudget(loadIntake(t, map[string]string{"NATS_URL": "nats://127.0.0.1:4222"}))
	if total := 8*w.Total() + 2*in.Total(); total > fleetServerBudget {
		t.Fatalf("8 workers x %d + 2 intakes x %d = %d server connections, over the budget of %d", w.Total(), in.Total(), total, fleetServerBudget)
	} else {
		t.Logf("8 workers x %d + 2 intakes x %d = %d of %d", w.Total(), in.Total(), total, fleetServerBudget)
	}
}
