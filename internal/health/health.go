// Package health serves the liveness and readiness endpoints and the
// Prometheus registry of a process.
//
// /healthz answers 200 while the process runs. /readyz answers 200 only when
// the database answers and its schema is at the version this binary expects;
// otherwise 503 with a fixed reason word (never error text).
package health

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Register adds /healthz, /readyz and /metrics to mux.
func Register(mux *http.ServeMux, pool *pgxpool.Pool, gatherer prometheus.Gatherer) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		write(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		status, reason := Ready(r.Context(), pool)
		write(w, status, reason)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
}

// Ready checks the database and the schema version.
func Ready(ctx context.Context, pool *pgxpool.Pool) (int, string) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := pool.Ping(ctx); err != nil {
		return http.StatusServiceUnavailable, "database_unavailable"
	}
	applied, expected, err := pg.SchemaVersion(ctx, pool)
	if err != nil {
		return http.StatusServiceUnavailable, "database_unavailable"
	}
	if applied != expected {
		return http.StatusServiceUnavailable, "schema_version_mismatch"
	}
	return http.StatusOK, "ready"
}

func write(w http.ResponseWriter, status int, word string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"status": word})
}
