package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mightyetl/mightyetl/internal/app"
	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/natsbridge"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// runRelay runs the outbox relay alone (no HTTP, no request consumer) until
// SIGINT/SIGTERM. Any number of relays may run against one database.
func runRelay(args []string) int {
	var databaseURL string
	var nc config.NATS
	var db config.Database
	l := config.NewLoader("etlctl relay", args, os.Getenv)
	l.String(&databaseURL, "DATABASE_URL", "database-url", config.DefaultDatabaseURL, "PostgreSQL URL", nil)
	config.RegisterDatabase(l, &db)
	config.RegisterNATS(l, &nc)
	if err := l.Parse(); err != nil {
		fmt.Fprintf(os.Stderr, "etlctl relay: invalid configuration: %v\n", err)
		return 2
	}
	if err := nc.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "etlctl relay: invalid configuration: %v\n", err)
		return 2
	}
	if !nc.Enabled() {
		fmt.Fprintln(os.Stderr, "etlctl relay: invalid configuration: NATS_URL: required")
		return 2
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("component", "relay")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	pool, err := pg.NewPool(ctx, databaseURL, pg.PoolOptions{MaxConns: 4, ApplicationName: "mightyetl-relay", Pooler: db.Pooler})
	if err != nil {
		fmt.Fprintf(os.Stderr, "etlctl relay: database %s: %s\n", pg.RedactURL(databaseURL), pg.RedactError(err, databaseURL))
		return 1
	}
	defer pool.Close()
	bo := app.BridgeOptions(nc, "mightyetl-relay", 0)
	// The relay alone: no request consumer, whatever
	// MIGHTYETL_NATS_REQUESTS_ENABLED says.
	bo.ConsumeRequests = false
	bo.Pool, bo.Registry, bo.Log = pool, prometheus.NewRegistry(), log
	if bo.Relay, err = app.RelayListen(bo.Relay, db, databaseURL, "mightyetl-relay", log); err != nil {
		fmt.Fprintf(os.Stderr, "etlctl relay: %v\n", err)
		return 2
	}
	b := natsbridge.New(bo)
	if err := b.Start(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "etlctl relay: %v\n", err)
		return 1
	}
	log.Info("relay running")
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Stop(stopCtx); err != nil {
		fmt.Fprintf(os.Stderr, "etlctl relay: stop: %v\n", err)
		return 1
	}
	return 0
}
