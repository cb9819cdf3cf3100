package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/console"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/prometheus/client_golang/prometheus"
)

// Sizes of the intake's side pools.
const (
	healthPoolConns      = 1               // /readyz: one ping and one query at a time
	relayPoolConns       = 2               // outbox relay batches (its LISTEN connection is separate)
	healthStatementLimit = 5 * time.Second // /readyz gives up after 2s anyway
)

// Pools are the database pools of one intake process. Each role has its
// own, so a flood of requests cannot starve readiness or event delivery:
//   - Requests runs every use case (HTTP and NATS requests): cfg.PoolSize
//     connections, statement_timeout cfg.StatementTimeout;
//   - Health answers /readyz: one connection;
//   - Relay runs the outbox relay's batches: two connections.
//
// Close closes all three; the zero Pools is safe to Close.
type Pools struct {
	Requests, Health, Relay *pgxpool.Pool
}

// OpenPools connects the three pools of cfg.DatabaseURL (each pinged once)
// with application_name appName, or closes what it opened and fails.
func OpenPools(ctx context.Context, cfg config.Intake, appName string) (Pools, error) {
	var p Pools
	var err error
	open := func(dst **pgxpool.Pool, role string, o pg.PoolOptions) {
		if err != nil {
			return
		}
		o.ApplicationName = appName
		if *dst, err = pg.NewPool(ctx, cfg.DatabaseURL, o); err != nil {
			err = fmt.Errorf("%s pool: %w", role, err)
		}
	}
	open(&p.Requests, "request", pg.PoolOptions{MaxConns: int32(cfg.PoolSize), StatementTimeout: cfg.StatementTimeout})
	open(&p.Health, "health", pg.PoolOptions{MaxConns: healthPoolConns, StatementTimeout: min(cfg.StatementTimeout, healthStatementLimit)})
	open(&p.Relay, "relay", pg.PoolOptions{MaxConns: relayPoolConns, StatementTimeout: cfg.StatementTimeout})
	if err != nil {
		p.Close()
		return Pools{}, err
	}
	return p, nil
}

// Close closes every pool that is open.
func (p Pools) Close() {
	for _, pool := range []*pgxpool.Pool{p.Requests, p.Health, p.Relay} {
		if pool != nil {
			pool.Close()
		}
	}
}

// NewServerFromConfig wires the intake HTTP API of one process (cmd/intake
// and etlctl dev): an intake.Service on pools.Requests configured from cfg,
// its metrics registered on reg (also served on /metrics), /readyz on
// pools.Health, POST /api/etl/process limited to half of the request
// pool's connections, and a Server using authn (nil: deny). It returns the
// Service too, for other transports (the NATS request consumer) to share.
// The caller owns the pools and calls Server.Start / Server.Stop.
func NewServerFromConfig(cfg config.Intake, pools Pools, authn auth.Authenticator, log *slog.Logger, reg *prometheus.Registry) (*Server, *intake.Service, error) {
	if pools.Requests == nil {
		return nil, nil, fmt.Errorf("httpapi: no request pool")
	}
	m := metrics.NewIntake(reg)
	metrics.RegisterPools(reg, map[string]*pgxpool.Pool{"requests": pools.Requests, "health": pools.Health, "relay": pools.Relay})
	if pools.Health != nil {
		metrics.RegisterOldestPending(reg, pools.Health)
	}
	svc, err := intake.New(intake.Options{
		DB:               pools.Requests,
		PrincipalHashKey: []byte(cfg.PrincipalHashKey),
		MaxBatchRecords:  cfg.MaxBatchRecords,
		MaxAttempts:      cfg.MaxAttempts,
		Metrics:          m,
	})
	if err != nil {
		return nil, nil, err
	}
	var cons *console.Console
	if cfg.ConsoleEnabled {
		cons, err = console.New(console.Options{DB: pools.Requests, HashKey: []byte(cfg.PrincipalHashKey), Logger: log,
			BulkCancelCap: cfg.ConsoleBulkCancelCap, Replay: svc.OperatorReplay, MaxPayloadBytes: int64(cfg.MaxPayloadBytes)})
		if err != nil {
			return nil, nil, err
		}
	}
	srv, err := NewServer(Options{
		Addr:                  cfg.HTTPAddr,
		Service:               svc,
		Authenticator:         authn,
		Pool:                  pools.Health,
		Metrics:               m,
		Gatherer:              reg,
		Logger:                log,
		MaxPayloadBytes:       int64(cfg.MaxPayloadBytes),
		MaxInFlightBytes:      int64(cfg.MaxInFlightBytes),
		ProcessConcurrency:    max(1, int(pools.Requests.Config().MaxConns)/2),
		PollInterval:          cfg.WorkerPollInterval,
		DiagnosticJobsEnabled: cfg.DiagnosticJobsEnabled,
		Console:               cons,
		Operators:             auth.NewOperators(cfg.OperatorPrincipals),
		PrincipalHashKey:      []byte(cfg.PrincipalHashKey),
	})
	if err != nil {
		return nil, nil, err
	}
	return srv, svc, nil
}
