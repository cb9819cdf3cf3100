package app

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/console"
	"github.com/mightyetl/mightyetl/internal/httpapi"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/natsbridge"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/schemagate"
	"github.com/mightyetl/mightyetl/internal/startstop"
)

// Sizes of the intake's side pools, and the NATS bridge's stop bound.
const (
	healthPoolConns      = 1               // /readyz: one ping and one query at a time
	relayPoolConns       = 2               // outbox relay batches (its LISTEN connection is separate)
	healthStatementLimit = 5 * time.Second // /readyz gives up after 2s anyway
	// BridgeStopTimeout is how long Intake.Stop gives the NATS bridge
	// (request consumer, outbox relay) after the HTTP server stopped, on a
	// clock of its own: the shutdown grace bounds the HTTP drain only.
	BridgeStopTimeout = 10 * time.Second
)

// NewRegistry is a process's Prometheus registry: the Go runtime and
// process collectors and mightyetl_build_info, then whatever the process's
// parts register.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerBuildInfo(reg)
	return reg
}

// IntakePools are the database pools of one intake process. Each role has
// its own, so a flood of requests cannot starve readiness or event delivery:
//   - Requests runs every use case (HTTP and NATS requests): cfg.PoolSize
//     connections, statement_timeout cfg.StatementTimeout;
//   - Health answers /readyz: one connection;
//   - Relay runs the outbox relay's batches: two connections.
//
// Close closes all three; the zero IntakePools is safe to Close.
type IntakePools struct {
	Requests, Health, Relay *pgxpool.Pool
}

// OpenIntakePools connects the three pools of cfg.DatabaseURL (each pinged
// once) with application_name appName, or closes what it opened and fails.
func OpenIntakePools(ctx context.Context, cfg config.Intake, appName string) (IntakePools, error) {
	var p IntakePools
	var err error
	open := func(dst **pgxpool.Pool, role string, o pg.PoolOptions) {
		if err != nil {
			return
		}
		o.ApplicationName, o.Pooler = appName, cfg.Database.Pooler
		if *dst, err = pg.NewPool(ctx, cfg.DatabaseURL, o); err != nil {
			err = fmt.Errorf("%s pool: %w", role, err)
		}
	}
	open(&p.Requests, "request", pg.PoolOptions{MaxConns: int32(cfg.PoolSize), StatementTimeout: cfg.StatementTimeout})
	open(&p.Health, "health", pg.PoolOptions{MaxConns: healthPoolConns, StatementTimeout: min(cfg.StatementTimeout, healthStatementLimit)})
	open(&p.Relay, "relay", pg.PoolOptions{MaxConns: relayPoolConns, StatementTimeout: cfg.StatementTimeout})
	if err != nil {
		p.Close()
		return IntakePools{}, err
	}
	return p, nil
}

// Close closes every pool that is open.
func (p IntakePools) Close() {
	for _, pool := range []*pgxpool.Pool{p.Requests, p.Health, p.Relay} {
		if pool != nil {
			pool.Close()
		}
	}
}

// IntakeOptions are what an intake process gets besides its configuration
// and pools.
type IntakeOptions struct {
	// Authenticator decides the HTTP principal; nil denies every request.
	Authenticator auth.Authenticator
	// Logger receives the parts' logs; nil discards.
	Logger *slog.Logger
	// Registry receives every metric of the process and is served on
	// /metrics; nil means a fresh NewRegistry.
	Registry *prometheus.Registry
	// Name identifies the process's NATS connection in NATS monitoring
	// ("mightyetl-intake", "mightyetl-dev").
	Name string
	// Listener is the HTTP listener, bound by the caller (ListenHTTP)
	// before it started anything else; nil means Start binds cfg.HTTPAddr
	// first. A given listener is the Intake's from NewIntake on: it closes
	// it when it stops (a Stop before Start too), when Start fails, or when
	// NewIntake fails.
	Listener net.Listener
	// SchemaCheckInterval is how often the schema gate re-reads
	// pg.CheckCompatibility; zero means schemagate.DefaultInterval (10 s).
	SchemaCheckInterval time.Duration
	// OnSchemaCheck, when set, is called after every schema check that
	// answered, with its verdict (a test hook).
	OnSchemaCheck func(compatible bool)
}

// Intake is one intake process: the intake.Service on the request pool,
// the HTTP API (with the operator console when configured) and the NATS
// bridge (outbox relay and request consumer; nothing without NATS_URL).
// Build it with NewIntake; run it with Start and Stop, which follow
// internal/startstop. The caller owns the pools and closes them after Stop.
type Intake struct {
	// Service runs the use cases for every transport.
	Service *intake.Service
	// Server is the HTTP API; Server.Addr is the listening address once
	// started.
	Server *httpapi.Server
	// Bridge is the process's NATS side; Bridge.Enabled is false without
	// NATS_URL.
	Bridge *natsbridge.Bridge
	// SchemaGate is the schema-compatibility verdict: while it reports the
	// schema incompatible, the HTTP API answers every POST that creates or
	// changes a job with 503 etl_schema_incompatible and the request
	// consumer fetches nothing.
	SchemaGate *schemagate.Gate

	cfg      config.Intake
	listener net.Listener // IntakeOptions.Listener; nil: Start binds one
	ss       startstop.Base
	owners   *owners // MIGHTYETL_OWNER_*: quotas and claim weights (owners.go)
}

// NewIntake assembles the intake process of cfg on pools: the service's
// metrics and the pools' gauges registered on o.Registry (also served on
// /metrics), /readyz on pools.Health, POST /api/etl/process limited to half
// of the request pool's connections, the console when cfg.ConsoleEnabled,
// and the NATS bridge on pools.Relay. Nothing runs until Start.
func NewIntake(cfg config.Intake, pools IntakePools, o IntakeOptions) (in *Intake, err error) {
	if o.Listener != nil {
		defer func() {
			if err != nil {
				_ = o.Listener.Close()
			}
		}()
	}
	if pools.Requests == nil {
		return nil, fmt.Errorf("app: no request pool")
	}
	if o.Registry == nil {
		o.Registry = NewRegistry()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	reg, log := o.Registry, o.Logger
	m := metrics.NewIntake(reg)
	metrics.RegisterPools(reg, map[string]*pgxpool.Pool{"requests": pools.Requests, "health": pools.Health, "relay": pools.Relay})
	if pools.Health != nil {
		metrics.RegisterOldestPending(reg, pools.Health)
	}
	ownerSettings, err := cfg.Owners.Load([]byte(cfg.PrincipalHashKey))
	if err != nil {
		return nil, err
	}
	svc, err := intake.New(intake.Options{
		DB:               pools.Requests,
		PrincipalHashKey: []byte(cfg.PrincipalHashKey),
		MaxBatchRecords:  cfg.MaxBatchRecords,
		MaxAttempts:      cfg.MaxAttempts,
		Metrics:          m,
		Uploads:          cfg.Uploads.Options(),
		Quotas:           ownerSettings.Quotas,

		MaxScheduleHorizon: cfg.MaxScheduleHorizon,
	})
	if err != nil {
		return nil, err
	}
	gatePool := pools.Health
	if gatePool == nil {
		gatePool = pools.Requests
	}
	gate := schemagate.New(schemagate.Options{DB: gatePool, Interval: o.SchemaCheckInterval,
		CheckTimeout: healthStatementLimit, Logger: log, OnCheck: o.OnSchemaCheck})
	var cons *console.Console
	if cfg.ConsoleEnabled {
		cons, err = console.New(console.Options{DB: pools.Requests, HashKey: []byte(cfg.PrincipalHashKey), Logger: log,
			BulkCancelCap: cfg.ConsoleBulkCancelCap, Replay: svc.OperatorReplay, MaxPayloadBytes: int64(cfg.MaxPayloadBytes)})
		if err != nil {
			return nil, err
		}
	}
	srv, err := httpapi.NewServer(httpapi.Options{
		Addr:                  cfg.HTTPAddr,
		Service:               svc,
		Authenticator:         o.Authenticator,
		Pool:                  pools.Health,
		Metrics:               m,
		Gatherer:              reg,
		Logger:                log,
		MaxPayloadBytes:       int64(cfg.MaxPayloadBytes),
		MaxInFlightBytes:      int64(cfg.MaxInFlightBytes),
		ProcessConcurrency:    processConcurrency(pools.Requests.Config().MaxConns),
		PollInterval:          cfg.WorkerPollInterval,
		DiagnosticJobsEnabled: cfg.DiagnosticJobsEnabled,
		Console:               cons,
		Operators:             auth.NewOperators(cfg.OperatorPrincipals),
		PrincipalHashKey:      []byte(cfg.PrincipalHashKey),
		SchemaGate:            gate,
	})
	if err != nil {
		return nil, err
	}
	bo := BridgeOptions(cfg.NATS, o.Name, cfg.MaxPayloadBytes)
	bo.Pool, bo.Service, bo.Registry, bo.Log = pools.Relay, svc, reg, log
	if cfg.NATS.Enabled() {
		if bo.Relay, err = RelayListen(bo.Relay, cfg.Database, cfg.DatabaseURL, o.Name, log); err != nil {
			return nil, err
		}
	}
	bo.Requests.Gate = gate
	bridge := natsbridge.New(bo)
	if cons != nil {
		cons.SetRelayState(bridge.RelayState)
	}
	own := &owners{cfg: cfg.Owners, hashKey: []byte(cfg.PrincipalHashKey), db: pools.Requests, svc: svc, log: log, current: ownerSettings}
	return &Intake{Service: svc, Server: srv, Bridge: bridge, SchemaGate: gate, cfg: cfg, listener: o.Listener, owners: own}, nil
}

// sampler is the console's rate sampler, or a part that does nothing when
// the console is disabled.
func (in *Intake) sampler() startstop.Service {
	if c := in.Server.Console(); c != nil {
		return c.Sampler()
	}
	return noPart{}
}

// noPart is a startstop.Service with nothing to run.
type noPart struct{}

func (noPart) Start(context.Context) error { return nil }
func (noPart) Stop(context.Context) error  { return nil }

// processConcurrency is how many POST /api/etl/process transactions run at
// once on a request pool of conns connections: half of them, at least one,
// so status, list and cancel always find a connection.
func processConcurrency(conns int32) int { return max(1, int(conns)/2) }

// Start binds the HTTP listener (unless IntakeOptions.Listener gave one),
// so that a taken port fails before anything started, then starts the
// schema gate (its first check runs before Start goes on, so the first
// request and the request consumer find its verdict), then the NATS
// bridge, then the console's rate sampler (when the console is enabled),
// then the HTTP server on the listener (so the first request served finds
// the relay running), and returns once the server serves. The bridge runs
// until Stop or until ctx ends; ctx bounds only the server's start-up. An
// error (ListenHTTP's, naming MIGHTYETL_HTTP_ADDR; the bridge's, the
// sampler's or the server's, unwrapped) leaves nothing running and the
// listener closed; a second Start returns startstop.ErrAlreadyStarted, a
// Start after Stop startstop.ErrStopped.
func (in *Intake) Start(ctx context.Context) error {
	return in.ss.Start(ctx, func(ctx context.Context) (startstop.StopFunc, error) {
		ln := in.listener
		in.listener = nil // the server's (or closed) from here on
		if ln == nil {
			var err error
			if ln, err = ListenHTTP(ctx, in.cfg); err != nil {
				in.stopUnstarted(ctx)
				return nil, err
			}
		}
		if err := in.Service.Start(ctx); err != nil {
			_ = ln.Close()
			in.stopUnstarted(ctx)
			return nil, err
		}
		// The configured claim weights (logged; a failure keeps the
		// weights as they were and does not stop the start).
		_ = in.owners.writeWeights(ctx, in.owners.current)
		if err := in.SchemaGate.Start(ctx); err != nil {
			_ = ln.Close()
			in.stopUnstarted(ctx)
			_ = in.Service.Stop(context.WithoutCancel(ctx)) // nothing submitted yet
			return nil, err
		}
		if err := in.Bridge.Start(ctx); err != nil {
			_ = ln.Close()
			in.stopUnstarted(ctx)
			_ = in.SchemaGate.Stop(context.WithoutCancel(ctx))
			_ = in.Service.Stop(context.WithoutCancel(ctx)) // nothing submitted yet
			return nil, err
		}
		if err := in.sampler().Start(ctx); err != nil {
			_ = ln.Close()
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), BridgeStopTimeout)
			defer cancel()
			_ = in.Server.Stop(stopCtx)
			_ = in.Bridge.Stop(stopCtx)
			_ = in.SchemaGate.Stop(stopCtx)
			_ = in.Service.Stop(stopCtx)
			return nil, err
		}
		if err := in.Server.StartOn(ctx, ln); err != nil { // closes ln on error
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), BridgeStopTimeout)
			defer cancel()
			_ = in.sampler().Stop(stopCtx)
			_ = in.Bridge.Stop(stopCtx)
			_ = in.SchemaGate.Stop(stopCtx)
			_ = in.Service.Stop(stopCtx)
			return nil, err
		}
		return in.stop, nil
	})
}

// stop drains the HTTP server until ctx ends, then stops the console's rate
// sampler and the bridge within BridgeStopTimeout of their own, then the
// intake's group commit. It returns the server's error (ctx's when
// the drain was cut short): the bridge's stop is best effort (what it did
// not publish stays in the outbox).
func (in *Intake) stop(ctx context.Context) error {
	err := in.Server.Stop(ctx)
	if ctx.Err() != nil {
		// ctx cut the drain short and the server is closing what remains:
		// wait for that (it is quick), so stopped means stopped.
		_ = in.Server.Stop(context.WithoutCancel(ctx))
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), BridgeStopTimeout)
	defer cancel()
	_ = in.sampler().Stop(bctx) // cancels its read in flight: quick
	_ = in.Bridge.Stop(bctx)
	_ = in.SchemaGate.Stop(bctx) // cancels its check in flight: quick
	// Last, the group commit: what the server and the bridge handed it has
	// its outcome before the caller closes the pools (each flush is bounded
	// by the intake's flush timeout).
	_ = in.Service.Stop(context.WithoutCancel(ctx))
	return err
}

// Stop stops the HTTP server (draining requests in flight until ctx ends),
// then the NATS bridge. It returns ctx.Err() when ctx ends first (the stop
// goes on in the background; a later Stop waits for it), or the server's
// stop error. Safe to call twice, concurrently, and before Start (which
// then only closes the HTTP listener).
func (in *Intake) Stop(ctx context.Context) error {
	err := in.ss.Stop(ctx)
	if err == nil && !in.ss.Started() && in.listener != nil {
		_ = in.listener.Close() // given, never served
	}
	return err
}

// stopUnstarted marks the parts Start has not started yet as stopped (a
// Stop before Start), so that none of them can start after a failed Start.
func (in *Intake) stopUnstarted(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	_ = in.Server.Stop(ctx)
	_ = in.sampler().Stop(ctx)
	_ = in.Bridge.Stop(ctx)
	_ = in.SchemaGate.Stop(ctx)
}
