// Command intake serves mightyETL's HTTP API: it validates and stores jobs,
// answers status, list and cancellation requests and runs the synchronous
// ETL path. Configuration comes from flags and MIGHTYETL_* environment
// variables (see internal/config.Intake); a bad setting exits with status 2
// and one line naming it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/mightyetl/mightyetl/internal/app"
	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/tracing"
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stderr))
}

// run is the whole binary: it returns the exit status (2 for a rejected
// configuration) and writes logs and one-line errors to stderr.
func run(args []string, getenv func(string) string, stderr io.Writer) int {
	app.SetGCPercentDefault(getenv, app.IntakeGCPercent)
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg, loader, err := config.LoadIntake(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		loader.Usage(os.Stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "intake: configuration: %v\n", err)
		if rerr := config.RecordRejection(getenv(config.RejectionTextfileEnv), "intake"); rerr != nil {
			fmt.Fprintf(stderr, "intake: could not record the rejection in %s\n", config.RejectionTextfileEnv)
		}
		return 2
	}
	authn, err := cfg.AuthenticatorLog(log)
	if err != nil {
		fmt.Fprintf(stderr, "intake: configuration: MIGHTYETL_AUTH_MODE=%s: %v\n", cfg.AuthMode, err)
		return 2
	}
	for _, s := range loader.Provenance() {
		log.Info("setting", "name", s.Name, "value", s.Value, "source", string(s.Source))
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	// The HTTP port first: taken, it fails before anything connects, with
	// one line naming MIGHTYETL_HTTP_ADDR.
	ln, err := app.ListenHTTP(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "intake: %v\n", err)
		return 1
	}
	defer ln.Close() // the intake's once handed over; closing twice is harmless

	// Tracing is on only when an OTLP endpoint is set (OTEL_* variables).
	tcfg, shutdownTracing, err := tracing.Setup(ctx, "mightyetl-intake")
	if err != nil {
		fmt.Fprintf(stderr, "intake: configuration: %v\n", err)
		return 2
	}
	defer func() { _ = shutdownTracing(context.WithoutCancel(ctx)) }() // best-effort flush at exit
	if tcfg.Enabled {
		log.Info("tracing on", "protocol", tcfg.Protocol)
	}

	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// Three pools: requests (statement_timeout), /readyz and the outbox
	// relay, so neither readiness nor event delivery waits behind requests.
	pools, err := app.OpenIntakePools(startCtx, cfg, "mightyetl-intake")
	if err != nil {
		fmt.Fprintf(stderr, "intake: database %s: %s\n", pg.RedactURL(cfg.DatabaseURL), cfg.RedactError(err))
		return 1
	}
	defer pools.Close()
	app.LogConnBudget(log, app.IntakeConnBudget(cfg))
	// The schema-compatibility contract (pg.CheckCompatibility): an older
	// schema or a newer one that no longer admits this binary's level stops
	// the start; a newer compatible schema (a rolling deploy) does not.
	compat, err := pg.CheckCompatibility(startCtx, pools.Requests)
	if err != nil {
		fmt.Fprintf(stderr, "intake: %v\n", err)
		return 1
	}
	if !compat.Compatible {
		fmt.Fprintf(stderr, "intake: %s\n", compat.Reason)
		return 1
	}

	in, err := app.NewIntake(cfg, pools, app.IntakeOptions{Authenticator: authn, Logger: log, Registry: app.NewRegistry(), Name: "mightyetl-intake", Listener: ln})
	if err != nil {
		fmt.Fprintf(stderr, "intake: %v\n", err)
		return 2
	}
	// The bridge runs until ctx ends (SIGINT/SIGTERM) or Stop.
	if err := in.Start(ctx); err != nil {
		fmt.Fprintf(stderr, "intake: %v\n", err)
		return 1
	}
	if !in.Bridge.Enabled() {
		log.Info("NATS_URL not set; no outbox relay or request consumer (workers poll)")
	}
	log.Info("intake listening", "addr", in.Server.Addr())
	// SIGHUP re-reads MIGHTYETL_OWNER_OVERRIDES_FILE (quotas and claim
	// weights); a file that cannot be used keeps the last good one.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_ = in.ReloadOwners(ctx) // logged
			}
		}
	}()
	<-ctx.Done()
	log.Info("intake stopping")
	stopCtx, cancelStop := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancelStop()
	if err := in.Stop(stopCtx); err != nil {
		log.Error("intake stop", "error_class", "shutdown_timeout")
		return 1
	}
	return 0
}
