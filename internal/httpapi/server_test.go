package httpapi

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/prometheus/client_golang/prometheus"
)

// testIntakeConfig is a valid intake configuration on databaseURL.
func testIntakeConfig(databaseURL string) config.Intake {
	return config.Intake{DatabaseURL: databaseURL, HTTPAddr: "127.0.0.1:0", MaxPayloadBytes: 1 << 20, MaxBatchRecords: 1000,
		MaxAttempts: 3, WorkerPollInterval: time.Second, MaxInFlightBytes: 64 << 20, StatementTimeout: 7 * time.Second, PoolSize: 4}
}

func openTestPools(t *testing.T, cfg config.Intake) Pools {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pools, err := OpenPools(ctx, cfg, "mightyetl-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pools.Close)
	return pools
}

func get(t *testing.T, url string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hr, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	res, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

func TestServerStartStop(t *testing.T) {
	_, url := pgtest.NewDatabase(t)
	srv, svc, err := NewServerFromConfig(testIntakeConfig(url), openTestPools(t, testIntakeConfig(url)), nil, nil, prometheus.NewRegistry())
	if err != nil || svc == nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/api/etl/jobs": 401} {
		if got := get(t, "http://"+srv.Addr()+path); got != want {
			t.Errorf("%s: %d, want %d", path, got, want)
		}
	}
	http.DefaultClient.CloseIdleConnections()
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := srv.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(stopCtx); err != nil {
		t.Fatalf("second stop: %v", err)
	}
}

// TestIntakePools: the intake's request pool has the configured size and
// statement_timeout; /readyz runs on a pool of its own and answers while
// requests hold every request connection; the relay has its own pool too;
// /process gets half of the request pool.
func TestIntakePools(t *testing.T) {
	_, url := pgtest.NewDatabase(t)
	cfg := testIntakeConfig(url)
	pools := openTestPools(t, cfg)
	ctx := context.Background()
	if pools.Requests == pools.Health || pools.Requests == pools.Relay || pools.Health == pools.Relay {
		t.Fatal("pools are shared")
	}
	if n := pools.Requests.Config().MaxConns; n != int32(cfg.PoolSize) {
		t.Errorf("request pool size %d, want %d", n, cfg.PoolSize)
	}
	for name, p := range map[string]*pgxpool.Pool{"request": pools.Requests, "relay": pools.Relay} {
		var timeout string
		if err := p.QueryRow(ctx, "SHOW statement_timeout").Scan(&timeout); err != nil || timeout != "7s" {
			t.Errorf("%s pool statement_timeout %q (%v), want 7s", name, timeout, err)
		}
	}

	srv, _, err := NewServerFromConfig(cfg, pools, nil, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if got := srv.opts.ProcessConcurrency; got != cfg.PoolSize/2 {
		t.Errorf("/process concurrency %d, want half the request pool (%d)", got, cfg.PoolSize/2)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		http.DefaultClient.CloseIdleConnections()
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = srv.Stop(stopCtx)
	}()
	// Every request connection busy: readiness must not wait for one.
	var held []*pgxpool.Conn
	for range cfg.PoolSize {
		c, err := pools.Requests.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	status := get(t, "http://"+srv.Addr()+"/readyz")
	for _, c := range held {
		c.Release()
	}
	if status != 200 {
		t.Fatalf("/readyz with the request pool exhausted: %d", status)
	}
}
