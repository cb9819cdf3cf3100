// Package health serves the liveness and readiness endpoints and the
// Prometheus registry of a process. The intake and the worker both use it.
//
// /healthz answers 200 while the process runs. /readyz answers 200 only when
// the database answers and its schema is compatible with this binary
// (pg.CheckCompatibility: within the binary's schema range, or newer and
// admitting the binary's level); otherwise 503 with a fixed reason (never
// error text). Bodies are
// text/plain and every response carries Cache-Control: no-store.
package health

import (
	"context"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Register adds GET /healthz, /readyz and /metrics to mux. A nil pool makes
// /readyz answer 503 "no database".
func Register(mux *http.ServeMux, pool *pgxpool.Pool, gatherer prometheus.Gatherer) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		write(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if reason := NotReady(r.Context(), pool); reason != "" {
			write(w, http.StatusServiceUnavailable, "not ready: "+reason)
			return
		}
		write(w, http.StatusOK, "ready")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{
		// OpenMetrics when the scraper asks for it: the only exposition that
		// carries the trace-id exemplars of the latency histograms.
		EnableOpenMetrics: true,
	}))
}

// NotReady checks the database and the schema version and returns a fixed
// reason, or "" when ready.
func NotReady(ctx context.Context, pool *pgxpool.Pool) string {
	if pool == nil {
		return "no database"
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := pool.Ping(ctx); err != nil {
		return "database unreachable"
	}
	c, err := pg.CheckCompatibility(ctx, pool)
	if err != nil {
		return "schema version unknown"
	}
	if !c.Compatible {
		return "schema version incompatible"
	}
	return ""
}

func write(w http.ResponseWriter, status int, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(text + "\n"))
}
