package worker

import (
	"log/slog"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/startstop"
	"github.com/mightyetl/mightyetl/internal/startstop/startstoptest"
	"github.com/prometheus/client_golang/prometheus"
)

// Every role runs the shared startstop stress test on its own, against a
// real (empty) database.
func TestRoleStartStopStress(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDatabase(t)
	exec := pgtest.NewPool(t, url, 4)
	renew := pgtest.NewPool(t, url, 2)
	cfg := Config{PollInterval: 10 * time.Millisecond, RenewInterval: 10 * time.Millisecond, ShutdownGrace: time.Second}.WithDefaults()
	parts := func() (*claimSet, *metrics.Worker, *testSignals) {
		m := metrics.NewWorker(prometheus.NewRegistry())
		sig := &testSignals{}
		return newClaimSet(&cfg, m, sig), m, sig
	}
	roles := map[string]func(t *testing.T) startstop.Service{
		"producer": func(*testing.T) startstop.Service {
			claims, m, sig := parts()
			pool := newExecutorPool(&cfg, exec, claims, nil, nil, m, nil, sig)
			return newProducer(&cfg, exec, claims, pool, m, discard(), sig)
		},
		"executorPool": func(*testing.T) startstop.Service {
			claims, m, sig := parts()
			return newExecutorPool(&cfg, exec, claims, newCompleter(&cfg, exec, claims, m, sig), nil, m, discard(), sig)
		},
		"completer": func(*testing.T) startstop.Service {
			claims, m, sig := parts()
			return newCompleter(&cfg, exec, claims, m, sig)
		},
		"renewer": func(*testing.T) startstop.Service {
			claims, m, sig := parts()
			return newRenewer(&cfg, renew, claims, m, discard(), sig)
		},
	}
	for name, newRole := range roles {
		t.Run(name, func(t *testing.T) { startstoptest.Stress(t, newRole, time.Minute) })
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
