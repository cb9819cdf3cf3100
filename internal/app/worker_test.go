package app

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/natstest"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/startstop"
	"github.com/mightyetl/mightyetl/internal/startstop/startstoptest"
)

// testWorkerConfig is a valid worker configuration on databaseURL with a
// metrics listener on a free port, and NATS when natsURL is set.
func testWorkerConfig(t *testing.T, databaseURL, natsURL string) config.Worker {
	t.Helper()
	env := map[string]string{
		"DATABASE_URL":                    databaseURL,
		"MIGHTYETL_METRICS_ADDR":          "127.0.0.1:0",
		"MIGHTYETL_WORKER_CONCURRENCY":    "2",
		"MIGHTYETL_WORKER_POLL_INTERVAL":  "1s",
		"MIGHTYETL_SHUTDOWN_GRACE_PERIOD": "1s",
	}
	if natsURL != "" {
		env["NATS_URL"] = natsURL
		env["MIGHTYETL_NATS_SUBJECT_PREFIX"] = natstest.Prefix(t)
	}
	cfg, _, err := config.LoadWorker(nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func newTestWorkerProcess(t *testing.T, cfg config.Worker) *WorkerProcess {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ln, err := ListenMetrics(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewWorkerProcess(ctx, cfg, nil, ln, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestWorkerProcessStartStop: a started worker process serves /healthz on
// its metrics listener; Stop closes the listener and the pools, and a
// second Stop agrees.
func TestWorkerProcessStartStop(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDatabase(t)
	p := newTestWorkerProcess(t, testWorkerConfig(t, url, ""))
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := get(t, "http://"+p.MetricsAddr()+"/healthz"); got != http.StatusOK {
		t.Fatalf("/healthz: %d", got)
	}
	http.DefaultClient.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	if err := p.exec.Ping(ctx); err == nil {
		t.Fatal("the execution pool is open after Stop")
	}
}

// TestWorkerProcessStress runs the shared start/stop stress test against
// whole worker processes with NATS and a metrics listener (worker roles,
// NATS subscriptions, metrics server, pools), every round on one database.
func TestWorkerProcessStress(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDatabase(t)
	cfg := testWorkerConfig(t, url, natstest.URL(t))
	startstoptest.Stress(t, func(t *testing.T) startstop.Service {
		p := newTestWorkerProcess(t, cfg)
		t.Cleanup(func() { _ = p.Stop(context.Background()) })
		return p
	}, 30*time.Second)
}
