// Package apptest assembles the real intake and worker processes for tests
// that serve the intake's HTTP API or run its NATS bridge themselves (behind
// httptest, or without NATS), from settings given as an environment, so
// those tests need not import internal/config.
package apptest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/app"
	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/prometheus/client_golang/prometheus"
)

// Intake loads the intake's configuration from getenv, opens its pools
// (closed when t ends), builds app.Intake named name with a discarding
// logger and a registry of its own, and starts its group commit and its
// schema gate (both stopped when t ends). Nothing else runs: the caller starts the HTTP server or the
// bridge it needs and stops it before t's clean-up closes the pools.
func Intake(t testing.TB, getenv func(string) string, name string) *app.Intake {
	t.Helper()
	icfg, _, err := config.LoadIntake(nil, getenv)
	if err != nil {
		t.Fatal(err)
	}
	authn, err := icfg.Authenticator()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pools, err := app.OpenIntakePools(ctx, icfg, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pools.Close)
	in, err := app.NewIntake(icfg, pools, app.IntakeOptions{Authenticator: authn, Logger: slog.New(slog.DiscardHandler),
		Registry: prometheus.NewRegistry(), Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Service.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.Service.Stop(context.Background()) })
	// The schema gate refuses submissions and pauses the request consumer
	// until it has seen a compatible schema: start it too.
	if err := in.SchemaGate.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.SchemaGate.Stop(context.Background()) })
	return in
}

// WorkerProcess loads the worker's configuration from getenv and builds
// app.WorkerProcess (pools open, schema checked, no metrics listener) with
// a discarding logger. The caller starts it; it is stopped, within 20
// seconds, when t ends (also when never started: that closes its pools).
func WorkerProcess(t testing.TB, getenv func(string) string) *app.WorkerProcess {
	t.Helper()
	wcfg, l, err := config.LoadWorker(nil, getenv)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wp, err := app.NewWorkerProcess(ctx, wcfg, l.Provenance(), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = wp.Stop(ctx)
	})
	return wp
}
