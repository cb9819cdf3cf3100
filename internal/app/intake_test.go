package app

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/natstest"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/startstop"
	"github.com/mightyetl/mightyetl/internal/startstop/startstoptest"
	"github.com/mightyetl/mightyetl/internal/testio"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testio.AsyncCloseLeaks()...)
}

// testIntakeConfig is a valid intake configuration on databaseURL.
func testIntakeConfig(databaseURL string) config.Intake {
	return config.Intake{DatabaseURL: databaseURL, HTTPAddr: "127.0.0.1:0", MaxPayloadBytes: 1 << 20, MaxBatchRecords: 1000,
		MaxAttempts: 3, WorkerPollInterval: time.Second, MaxInFlightBytes: 64 << 20, StatementTimeout: 7 * time.Second, PoolSize: 4}
}

func openTestPools(t *testing.T, cfg config.Intake) IntakePools {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pools, err := OpenIntakePools(ctx, cfg, "mightyetl-test")
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

func TestIntakeStartStop(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDatabase(t)
	cfg := testIntakeConfig(url)
	cfg.ConsoleEnabled = true
	cfg.PrincipalHashKey = "0123456789abcdef0123456789abcdef-test"
	in, err := NewIntake(cfg, openTestPools(t, cfg), IntakeOptions{})
	if err != nil || in.Service == nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := in.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if in.Bridge.Enabled() {
		t.Error("bridge enabled without NATS_URL")
	}
	sampler := in.Server.Console().Sampler()
	if err := sampler.Start(ctx); !errors.Is(err, startstop.ErrAlreadyStarted) {
		t.Errorf("the console's sampler: Start = %v, want ErrAlreadyStarted (the intake started it)", err)
	}
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/api/etl/jobs": 401} {
		if got := get(t, "http://"+in.Server.Addr()+path); got != want {
			t.Errorf("%s: %d, want %d", path, got, want)
		}
	}
	http.DefaultClient.CloseIdleConnections()
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := in.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	if err := in.Stop(stopCtx); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	if err := sampler.Start(ctx); !errors.Is(err, startstop.ErrStopped) {
		t.Errorf("the console's sampler after Stop: Start = %v, want ErrStopped (the intake stopped it)", err)
	}
}

// TestIntakeStress runs the shared start/stop stress test against whole
// intake processes with NATS (HTTP server, outbox relay, request consumer
// and console sampler), every round on one database and prefix.
func TestIntakeStress(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDatabase(t)
	cfg := testIntakeConfig(url)
	cfg.ConsoleEnabled = true
	cfg.PrincipalHashKey = "0123456789abcdef0123456789abcdef-test"
	cfg.NATS = config.NATS{URL: natstest.URL(t), SubjectPrefix: natstest.Prefix(t), RequestsEnabled: true,
		OutboxPollInterval: time.Second, OutboxBatchSize: 100}
	pools := openTestPools(t, cfg)
	startstoptest.Stress(t, startstoptest.Built(func() (*Intake, error) {
		return NewIntake(cfg, pools, IntakeOptions{Name: "app-stress-test"})
	}), 30*time.Second)
}

// TestIntakeStartFailureLeavesNothingRunning: a taken HTTP port fails Start
// first, with one line naming the address and MIGHTYETL_HTTP_ADDR, before
// the bridge or the console's sampler started (both are stopped: they can
// never start), and the intake is stopped.
func TestIntakeStartFailureLeavesNothingRunning(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDatabase(t)
	cfg := testIntakeConfig(url)
	cfg.NATS = config.NATS{URL: natstest.URL(t), SubjectPrefix: natstest.Prefix(t), OutboxPollInterval: time.Second, OutboxBatchSize: 100}
	cfg.ConsoleEnabled = true
	cfg.PrincipalHashKey = "0123456789abcdef0123456789abcdef-test"
	pools := openTestPools(t, cfg)
	first, err := NewIntake(cfg, pools, IntakeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer first.Stop(context.Background())
	cfg.HTTPAddr = first.Server.Addr() // taken
	second, err := NewIntake(cfg, pools, IntakeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = second.Start(t.Context())
	if err == nil {
		t.Fatal("Start on a taken address succeeded")
	}
	want := "listen " + cfg.HTTPAddr + " (MIGHTYETL_HTTP_ADDR / --http-addr): address already in use"
	if err.Error() != want || !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("Start on a taken address: %q, want %q (wrapping EADDRINUSE)", err, want)
	}
	if got := second.Bridge.Start(t.Context()); !errors.Is(got, startstop.ErrStopped) {
		t.Fatalf("the failed intake's bridge: Start = %v, want ErrStopped (stopped)", got)
	}
	if got := second.Server.Console().Sampler().Start(t.Context()); !errors.Is(got, startstop.ErrStopped) {
		t.Fatalf("the failed intake's console sampler: Start = %v, want ErrStopped (stopped)", got)
	}
	if err := second.Stop(t.Context()); err != nil {
		t.Fatalf("Stop after a failed Start: %v", err)
	}
}

// TestIntakePools: the intake's request pool has the configured size and
// statement_timeout; /readyz runs on a pool of its own and answers while
// requests hold every request connection; the relay has its own pool too;
// /process gets half of the request pool.
func TestIntakePools(t *testing.T) {
	t.Parallel()
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
	for conns, want := range map[int32]int{1: 1, 2: 1, 4: 2, 9: 4} {
		if got := processConcurrency(conns); got != want {
			t.Errorf("/process concurrency on %d connections: %d, want %d", conns, got, want)
		}
	}

	in, err := NewIntake(cfg, pools, IntakeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		http.DefaultClient.CloseIdleConnections()
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = in.Stop(stopCtx)
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
	status := get(t, "http://"+in.Server.Addr()+"/readyz")
	for _, c := range held {
		c.Release()
	}
	if status != 200 {
		t.Fatalf("/readyz with the request pool exhausted: %d", status)
	}
}

// TestIntakeServesOnTheGivenListener: an intake given a listener serves on
// it (whatever cfg.HTTPAddr says) and closes it when it stops; one stopped
// before it started closes its listener too.
func TestIntakeServesOnTheGivenListener(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDatabase(t)
	cfg := testIntakeConfig(url)
	pools := openTestPools(t, cfg)
	ln, err := ListenHTTP(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTPAddr = "192.0.2.1:1" // never bound: the listener is used instead
	in, err := NewIntake(cfg, pools, IntakeOptions{Listener: ln})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := in.Server.Addr(); got != ln.Addr().String() {
		t.Fatalf("serves on %s, want the given %s", got, ln.Addr())
	}
	if got := get(t, "http://"+ln.Addr().String()+"/healthz"); got != http.StatusOK {
		t.Fatalf("/healthz on the given listener: %d", got)
	}
	http.DefaultClient.CloseIdleConnections()
	if err := in.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("the given listener after Stop: Accept = %v, want net.ErrClosed", err)
	}

	unstarted, err := ListenHTTP(t.Context(), testIntakeConfig(url))
	if err != nil {
		t.Fatal(err)
	}
	never, err := NewIntake(cfg, pools, IntakeOptions{Listener: unstarted})
	if err != nil {
		t.Fatal(err)
	}
	if err := never.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := unstarted.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("the listener of an intake stopped before Start: Accept = %v, want net.ErrClosed", err)
	}
}
