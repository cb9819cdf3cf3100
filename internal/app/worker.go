package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/buildinfo"
	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/health"
	"github.com/mightyetl/mightyetl/internal/maintenance"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/startstop"
	"github.com/mightyetl/mightyetl/internal/worker"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

// WorkerProcess is a whole worker process: its two pools, the Worker, and
// the metrics/health server. cmd/worker and `etlctl dev` both run one.
// Start and Stop follow internal/startstop; the process owns its pools and
// listener and closes them when it stops (also at a Stop before Start, or
// when Start failed).
type WorkerProcess struct {
	Worker   *worker.Worker
	Registry *prometheus.Registry

	// Maintainer runs retention when this worker is the fleet's elected
	// maintainer; nil when MIGHTYETL_MAINTENANCE_ENABLED is false.
	Maintainer *maintenance.Maintainer

	exec     *pgxpool.Pool
	renew    *pgxpool.Pool
	server   *http.Server
	listener net.Listener
	log      *slog.Logger
	cfg      config.Worker
	nc       *nats.Conn

	ss startstop.Base
	// closeOnce closes the listener and the pools: at the end of the stop,
	// after a failed Start, or at a Stop before Start.
	closeOnce sync.Once
}

// ErrSchemaBehind means the database schema is not compatible with this
// binary (pg.CheckCompatibility); the wrapped text names both versions and
// whether to migrate up or deploy a newer binary.
var ErrSchemaBehind = errors.New("database schema is not compatible with this binary")

// NewWorkerProcess connects the pools, checks the schema version and builds
// the worker. metricsListener is the listener of the metrics and health
// server, bound by the caller before it started anything (ListenMetrics);
// nil serves none. The process owns it from here on and closes it when it
// stops, at a Stop before Start, or when NewWorkerProcess fails. provenance
// is logged once (LogConfiguration) and the worker's settings exported as
// mightyetl_worker_config_info.
func NewWorkerProcess(ctx context.Context, cfg config.Worker, provenance []config.Setting, metricsListener net.Listener, log *slog.Logger) (*WorkerProcess, error) {
	stmtTimeout := worker.StatementTimeout(cfg.RenewInterval)
	exec, renew, err := OpenPools(ctx, cfg.DatabaseURL, cfg.Database.Pooler, cfg.PoolSize, stmtTimeout, cfg.RenewInterval)
	if err != nil {
		if metricsListener != nil {
			_ = metricsListener.Close()
		}
		return nil, err
	}
	compat, err := pg.CheckCompatibility(ctx, exec)
	if err != nil || !compat.Compatible {
		exec.Close()
		renew.Close()
		if metricsListener != nil {
			_ = metricsListener.Close()
		}
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s", ErrSchemaBehind, compat.Reason)
	}
	applied := compat.Applied
	reg := NewRegistry()
	build := buildinfo.Read()
	m := metrics.NewWorker(reg)
	metrics.RegisterPools(reg, map[string]*pgxpool.Pool{"exec": exec, "renew": renew})
	m.ConfigInfo.WithLabelValues(build.Version, strconv.FormatInt(applied, 10), cfg.LeaseDuration.String(),
		cfg.RenewInterval.String(), cfg.SafetyMargin.String(), strconv.Itoa(cfg.Concurrency),
		cfg.PollInterval.String(), strconv.Itoa(cfg.MaxAttempts)).Set(1)
	LogConfiguration(log, "worker configuration", provenance, "version", build.Version, "commit", build.Commit, "schema_version", applied)
	LogConnBudget(log, WorkerConnBudget(cfg))

	w := worker.New(worker.Config{
		OwnerID: cfg.WorkerID, Concurrency: cfg.Concurrency, PollInterval: cfg.PollInterval,
		LeaseDuration: cfg.LeaseDuration, RenewInterval: cfg.RenewInterval, SafetyMargin: cfg.SafetyMargin,
		RetryBaseDelay: cfg.RetryBaseDelay, RetryMaxDelay: cfg.RetryMaxDelay, ShutdownGrace: cfg.ShutdownGrace,
		StatementTimeout: stmtTimeout, MaxJobDuration: cfg.MaxJobDuration,
		ChunkedSlots: chunkedSlots(cfg.ChunkedSlots), ChunkRecords: cfg.ChunkRecords, ChunkBytes: cfg.ChunkBytes,
		ChunkConns:  cfg.ChunkConns,
		ClaimOwners: chunkedSlots(cfg.ClaimOwners), // 0 (first-come first-served) is -1 there, as for chunked slots
		WakeupSlots: chunkedSlots(cfg.WakeupSlots), // 0 (none) is -1 there too
	}, exec, renew, worker.DefaultHandlers(cfg.MaxBatchRecords), m, log)
	p := &WorkerProcess{Worker: w, Registry: reg, exec: exec, renew: renew, log: log, cfg: cfg}
	p.Maintainer = newMaintainer(cfg, exec, reg, log)
	if metricsListener != nil {
		mux := http.NewServeMux()
		health.Register(mux, exec, reg)
		p.server = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		p.listener = metricsListener
	}
	return p, nil
}

// LogConfiguration logs msg once at info with attrs and, for each setting
// of provenance, a group named after it holding its value and source
// ("MIGHTYETL_SHUTDOWN_GRACE_PERIOD":{"value":"10s","source":"dev"}).
// Secret settings are already redacted in provenance.
func LogConfiguration(log *slog.Logger, msg string, provenance []config.Setting, attrs ...any) {
	for _, s := range provenance {
		attrs = append(attrs, slog.Group(s.Name, "value", s.Value, "source", string(s.Source)))
	}
	log.Info(msg, attrs...)
}

// connectNATS subscribes the worker to advisory wake-ups and revocations
// when NATS_URL is set. The connection retries forever in the background, so
// a NATS outage at start or later only slows the worker to its poll and
// renewal intervals; it never stops it.
func (p *WorkerProcess) connectNATS(ctx context.Context) error {
	if !p.cfg.NATS.Enabled() {
		p.log.Info("NATS_URL not set; claiming by polling only")
		return nil
	}
	em := metrics.NewEvents(p.Registry)
	nc, err := events.Connect(ctx, NATSConn(p.cfg.NATS, "mightyetl-worker"), p.log, em)
	if err != nil {
		return fmt.Errorf("connect NATS: %w", err)
	}
	if _, err := events.SubscribeWakeups(nc, p.cfg.NATS.SubjectPrefix, em, p.Worker.Wake); err != nil {
		nc.Close()
		return fmt.Errorf("subscribe wake-ups: %w", err)
	}
	if _, err := events.SubscribeRevocations(nc, p.cfg.NATS.SubjectPrefix, em, p.Worker.Revoke); err != nil {
		nc.Close()
		return fmt.Errorf("subscribe revocations: %w", err)
	}
	p.nc = nc
	return nil
}

// OpenPools opens a worker's two pools on databaseURL: the execution pool
// (claims, finish groups, failures) of execConns connections
// (MIGHTYETL_WORKER_POOL_SIZE), and a separate two-connection renewal pool,
// so handlers holding every execution connection can never starve renewal
// (WorkerConnBudget states the sum). Both plan each lease statement once
// per connection, as an index plan (pg.PoolOptions.PinnedPlans).
//
// Both are bounded on the server too, so a statement or transaction whose
// client vanished (a partition, a killed worker) ends there and frees its
// locks: the execution pool's statements by stmtTimeout plus a second (the
// worker's own context deadline fires first when the client is alive; a
// claim sets its own, stmtTimeout, in its transaction), its
// idle transactions by twice that; the renewal pool's statements by the
// renewal interval and its lock waits by a quarter of it, at most a second
// (renewal never waits on a held row: see lease.Renew). With
// pg.PoolerTransaction (MIGHTYETL_DATABASE_POOLER) those bounds and the
// pinned plans hold in the pools' transactions only (pg.PoolerTransaction):
// claims and renewals, single statements, are bounded by the worker's
// contexts and the pooler's query_timeout.
func OpenPools(ctx context.Context, databaseURL string, pooler pg.Pooler, execConns int, stmtTimeout, renewInterval time.Duration) (exec, renew *pgxpool.Pool, err error) {
	exec, err = pg.NewPool(ctx, databaseURL, pg.PoolOptions{MaxConns: int32(execConns), ApplicationName: "mightyetl-worker", PinnedPlans: true,
		StatementTimeout: stmtTimeout + time.Second, IdleInTransactionTimeout: 2 * (stmtTimeout + time.Second), Pooler: pooler})
	if err != nil {
		return nil, nil, fmt.Errorf("connect execution pool: %w", err)
	}
	renew, err = pg.NewPool(ctx, databaseURL, pg.PoolOptions{MaxConns: renewPoolConns, MinConns: 1, ApplicationName: "mightyetl-renewer", PinnedPlans: true,
		StatementTimeout: renewInterval, LockTimeout: min(time.Second, renewInterval/4), Pooler: pooler})
	if err != nil {
		exec.Close()
		return nil, nil, fmt.Errorf("connect renewal pool: %w", err)
	}
	return exec, renew, nil
}

// Start connects NATS (when configured) and starts the worker and the
// metrics server. An error leaves nothing running and the pools closed; a
// second Start returns startstop.ErrAlreadyStarted, a Start after Stop
// startstop.ErrStopped.
func (p *WorkerProcess) Start(ctx context.Context) error {
	return p.ss.Start(ctx, func(ctx context.Context) (startstop.StopFunc, error) {
		if err := p.connectNATS(ctx); err != nil {
			p.close()
			return nil, err
		}
		if err := p.Worker.Start(ctx); err != nil {
			if p.nc != nil {
				p.nc.Close()
			}
			p.close()
			return nil, err
		}
		if err := p.startMaintenance(ctx); err != nil {
			_ = p.Worker.Stop(ctx)
			if p.nc != nil {
				p.nc.Close()
			}
			p.close()
			return nil, err
		}
		served := make(chan struct{})
		if p.server != nil {
			go func() {
				defer close(served)
				if err := p.server.Serve(p.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
					p.log.Error("metrics server stopped", "error_class", "listen")
				}
			}()
		} else {
			close(served)
		}
		return func(ctx context.Context) error { return p.stop(ctx, served) }, nil
	})
}

// MetricsAddr is the metrics listener's address, or "" when not serving.
func (p *WorkerProcess) MetricsAddr() string {
	if p.listener == nil {
		return ""
	}
	return p.listener.Addr().String()
}

// stop drains the worker until ctx ends (see worker.Worker.Stop), then
// closes NATS, the metrics server and, once the worker finished (it may
// still hold connections after a cut-short stop), the pools. It returns the
// worker's stop error.
func (p *WorkerProcess) stop(ctx context.Context, served <-chan struct{}) error {
	p.stopMaintenance(ctx)
	err := p.Worker.Stop(ctx)
	if ctx.Err() != nil {
		// Cut short: the worker's stop goes on and may still hold pool
		// connections; wait for it before closing the pools.
		_ = p.Worker.Stop(context.WithoutCancel(ctx))
	}
	if p.nc != nil {
		p.nc.Close()
	}
	if p.server != nil {
		if p.server.Shutdown(ctx) != nil {
			_ = p.server.Close()
		}
	}
	<-served
	p.close()
	return err
}

// close closes the pools and an unserved listener, once.
func (p *WorkerProcess) close() {
	p.closeOnce.Do(func() {
		if p.listener != nil {
			_ = p.listener.Close() // already closed when the server served it
		}
		p.exec.Close()
		p.renew.Close()
	})
}

// Stop drains the worker, then closes the metrics server and the pools. It
// returns ctx.Err() when ctx ends first (the stop goes on in the background;
// a later Stop waits for it). Safe to call twice, concurrently, and before
// Start (which then only closes the pools).
func (p *WorkerProcess) Stop(ctx context.Context) error {
	err := p.ss.Stop(ctx)
	if err == nil && !p.ss.Started() {
		p.close() // never started: nothing else closes them
	}
	return err
}

// chunkedSlots maps MIGHTYETL_WORKER_CHUNKED_SLOTS to worker.Config's
// ChunkedSlots, whose zero means the default: 0 (claim no chunked job)
// becomes -1.
func chunkedSlots(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
