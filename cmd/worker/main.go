// Command worker runs mightyETL jobs: it claims durable jobs from PostgreSQL
// under exact leases, renews them while they run, and commits their results
// fenced by the lease. Configure it with flags or MIGHTYETL_* variables (see
// README); a bad setting exits with status 2 and one line.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/mightyetl/mightyetl/internal/app"
	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/tracing"
)

func main() {
	os.Exit(run())
}

func run() int {
	app.SetGCPercentDefault(os.Getenv, app.WorkerGCPercent)
	cfg, loader, err := config.LoadWorker(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "usage: worker [flags]")
		loader.Usage(os.Stderr)
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker: invalid configuration: %v\n", err)
		if rerr := config.RecordRejection(os.Getenv(config.RejectionTextfileEnv), "worker"); rerr != nil {
			fmt.Fprintf(os.Stderr, "worker: could not record the rejection in %s\n", config.RejectionTextfileEnv)
		}
		return 2
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("component", "worker")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	// The metrics port first: taken, it fails before anything connects,
	// with one line naming MIGHTYETL_METRICS_ADDR.
	metricsListener, err := app.ListenMetrics(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker: %v\n", err)
		return 1
	}
	defer metricsListener.Close() // the worker process's once handed over; closing twice is harmless

	// Tracing is on only when an OTLP endpoint is set (OTEL_* variables).
	tcfg, shutdownTracing, err := tracing.Setup(ctx, "mightyetl-worker")
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker: invalid configuration: %v\n", err)
		return 2
	}
	defer func() { _ = shutdownTracing(context.WithoutCancel(ctx)) }() // best-effort flush at exit
	if tcfg.Enabled {
		log.Info("tracing on", "protocol", tcfg.Protocol)
	}

	p, err := app.NewWorkerProcess(ctx, cfg, loader.Provenance(), metricsListener, log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker: %s\n", cfg.RedactError(err))
		return 1
	}
	if err := p.Start(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "worker: %s\n", cfg.RedactError(err))
		return 1
	}
	log.Info("worker ready", "metrics_addr", p.MetricsAddr())
	<-ctx.Done()
	log.Info("shutdown requested; draining")
	if err := p.Stop(context.WithoutCancel(ctx)); err != nil {
		fmt.Fprintf(os.Stderr, "worker: stop: %v\n", err)
		return 1
	}
	return 0
}
