package app

import (
	"log/slog"

	"github.com/mightyetl/mightyetl/internal/config"
)

// Fixed sizes of the worker's side pool (the intake's are healthPoolConns
// and relayPoolConns).
const (
	// renewPoolConns is the worker's renewal pool: one renewal statement
	// at a time, and a second connection while the first reconnects.
	renewPoolConns = 2
	// relayListenConns is the outbox relay's LISTEN connection, outside
	// every pool (pgxlisten holds one and replaces it when it breaks).
	relayListenConns = 1
)

// PoolBudget is the most server connections one pool (or lone
// connection) of a process opens.
type PoolBudget struct {
	Name     string
	MaxConns int
}

// ConnBudget is the most PostgreSQL server connections a process opens:
// one entry per pool, each bounded by its pgxpool MaxConns (a hard bound:
// pgxpool never holds more, connecting ones included). Through a pooler
// these are client connections of the pooler instead
// (docs/operations/connections.md).
type ConnBudget []PoolBudget

// Total is the sum of the pools' bounds: the process's maximum.
func (b ConnBudget) Total() int {
	n := 0
	for _, p := range b {
		n += p.MaxConns
	}
	return n
}

// Get is the bound of the pool named name, 0 when there is none.
func (b ConnBudget) Get(name string) int {
	for _, p := range b {
		if p.Name == name {
			return p.MaxConns
		}
	}
	return 0
}

// WorkerConnBudget is a worker process's connection budget:
// MIGHTYETL_WORKER_POOL_SIZE (execution pool) + 2 (renewal pool),
// whatever its slots and cores.
func WorkerConnBudget(cfg config.Worker) ConnBudget {
	return ConnBudget{{"exec", cfg.PoolSize}, {"renew", renewPoolConns}}
}

// IntakeConnBudget is an intake process's connection budget:
// MIGHTYETL_INTAKE_POOL_SIZE (requests) + 1 (/readyz and the schema gate)
// + 2 (outbox relay batches), + 1 LISTEN connection of the outbox relay
// when NATS_URL is set (without NATS no relay runs) and the relay has a
// URL to listen on (behind a transaction pooler without
// MIGHTYETL_DATABASE_DIRECT_URL it polls instead; with it, the LISTEN
// connection goes to PostgreSQL directly).
func IntakeConnBudget(cfg config.Intake) ConnBudget {
	b := ConnBudget{{"requests", cfg.PoolSize}, {"health", healthPoolConns}, {"relay", relayPoolConns}}
	if cfg.NATS.Enabled() && cfg.Database.ListenURL(cfg.DatabaseURL) != "" {
		b = append(b, PoolBudget{"relay_listen", relayListenConns})
	}
	return b
}

// LogConnBudget logs the process's maximum server connections once, at
// info: the total and each pool's bound, never the URL.
func LogConnBudget(log *slog.Logger, b ConnBudget) {
	pools := make([]any, 0, len(b))
	for _, p := range b {
		pools = append(pools, slog.Int(p.Name, p.MaxConns))
	}
	log.Info("database connection budget", "max_server_connections", b.Total(), slog.Group("pools", pools...))
}
