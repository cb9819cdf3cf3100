package app

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/maintenance"
	"github.com/mightyetl/mightyetl/internal/metrics"
)

// newMaintainer is the worker's built-in retention
// (MIGHTYETL_MAINTENANCE_ENABLED), on the execution pool (one connection
// at a time, inside the worker's connection budget), or nil when disabled:
// then no election is ever attempted and no maintenance metric exported.
func newMaintainer(cfg config.Worker, exec *pgxpool.Pool, reg prometheus.Registerer, log *slog.Logger) *maintenance.Maintainer {
	if !cfg.Maintenance.Enabled {
		log.Info("maintenance disabled (MIGHTYETL_MAINTENANCE_ENABLED=false); run `etlctl prune` on a schedule")
		return nil
	}
	return maintenance.New(exec, maintenance.Config{
		Holder:   cfg.WorkerID,
		Interval: cfg.Maintenance.Interval,
		Windows:  cfg.Maintenance.Prune.Windows(),
		Batch:    cfg.Maintenance.Prune.Batch,
		Logger:   log,
		Metrics:  metrics.NewMaintenance(reg),
	})
}

// startMaintenance starts the maintainer, if any.
func (p *WorkerProcess) startMaintenance(ctx context.Context) error {
	if p.Maintainer == nil {
		return nil
	}
	return p.Maintainer.Start(ctx)
}

// stopMaintenance stops the maintainer, if any, before the worker drains:
// a running batch rolls back and the leadership is resigned, so another
// worker takes it at its next attempt instead of after the term.
func (p *WorkerProcess) stopMaintenance(ctx context.Context) {
	if p.Maintainer != nil {
		_ = p.Maintainer.Stop(ctx)
	}
}
