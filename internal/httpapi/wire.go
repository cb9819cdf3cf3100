package httpapi

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// NewServerFromConfig wires the intake HTTP API of one process (cmd/intake
// and etlctl dev): an intake.Service on pool configured from cfg, its
// metrics registered on reg (also served on /metrics), and a Server using
// authn (nil: deny). It returns the Service too, for other transports (the
// NATS request consumer) to share. The caller owns pool and calls
// Server.Start / Server.Stop.
func NewServerFromConfig(cfg config.Intake, pool *pgxpool.Pool, authn auth.Authenticator, log *slog.Logger, reg *prometheus.Registry) (*Server, *intake.Service, error) {
	m := metrics.NewIntake(reg)
	svc, err := intake.New(intake.Options{
		DB:               pool,
		PrincipalHashKey: []byte(cfg.PrincipalHashKey),
		MaxBatchRecords:  cfg.MaxBatchRecords,
		MaxAttempts:      cfg.MaxAttempts,
		Metrics:          m,
	})
	if err != nil {
		return nil, nil, err
	}
	srv, err := NewServer(Options{
		Addr:                  cfg.HTTPAddr,
		Service:               svc,
		Authenticator:         authn,
		Pool:                  pool,
		Metrics:               m,
		Gatherer:              reg,
		Logger:                log,
		MaxPayloadBytes:       int64(cfg.MaxPayloadBytes),
		PollInterval:          cfg.WorkerPollInterval,
		DiagnosticJobsEnabled: cfg.DiagnosticJobsEnabled,
	})
	if err != nil {
		return nil, nil, err
	}
	return srv, svc, nil
}
