package httpapi

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/prometheus/client_golang/prometheus"
)

func TestServerStartStop(t *testing.T) {
	pool, _ := pgtest.NewDatabase(t)
	cfg := config.Intake{HTTPAddr: "127.0.0.1:0", MaxPayloadBytes: 1 << 20, MaxBatchRecords: 1000, MaxAttempts: 3, WorkerPollInterval: time.Second}
	srv, svc, err := NewServerFromConfig(cfg, pool, nil, nil, prometheus.NewRegistry())
	if err != nil || svc == nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/api/etl/jobs": 401} {
		res, err := http.Get("http://" + srv.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("%s: %d, want %d", path, res.StatusCode, want)
		}
	}
	http.DefaultClient.CloseIdleConnections()
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := srv.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(stopCtx); err != nil {
		t.Fatalf("second stop: %v", err)
	}
}
