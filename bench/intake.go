package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mightyetl/mightyetl/internal/httpapi"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// intakeConcurrency is the number of concurrent HTTP clients.
const intakeConcurrency = 32

// intakeBody is one small ETL batch.
const intakeBody = `[{"id":"r1","name":"ada","email":"ADA@EXAMPLE.COM","amount":"1.005"}]`

// benchAuth authenticates "Authorization: Bench <principal>". Bench only.
type benchAuth struct{}

func (benchAuth) Authenticate(r *http.Request) (string, error) {
	v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bench ")
	if !ok || v == "" {
		return "", fmt.Errorf("bench auth: no principal")
	}
	return v, nil
}

func (benchAuth) Challenge() string { return `Bench realm="mightyetl"` }

// intake serves the real HTTP API in-process (intake.Service + httpapi
// server, default group commit) and has intakeConcurrency clients POST
// /api/etl/jobs with distinct Idempotency-Keys for -duration: accepted/s and
// request latency. No worker runs.
func (h *harness) intake(ctx context.Context) ([]Result, error) {
	res := Result{System: "mightyetl", Scenario: "intake", Metrics: map[string]float64{},
		Settings: map[string]string{"clients": strconv.Itoa(intakeConcurrency), "duration": h.o.Duration.String(),
			"body": "1 ETL record", "server": "in-process httpapi + intake.Service, default group commit, pool 8"}}
	if err := h.fresh(ctx); err != nil {
		return []Result{res}, err
	}
	svc, err := intake.New(intake.Options{DB: h.pool, PrincipalHashKey: []byte("mightyetl-bench-principal-hash-key-0123456789"),
		Metrics: metrics.NewIntake(prometheus.NewRegistry())})
	if err != nil {
		return []Result{res}, err
	}
	srv, err := httpapi.NewServer(httpapi.Options{Addr: "127.0.0.1:0", Service: svc, Authenticator: benchAuth{}, Pool: h.pool})
	if err != nil {
		return []Result{res}, err
	}
	if err := srv.Start(ctx); err != nil {
		return []Result{res}, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = srv.Stop(stopCtx)
	}()
	url := "http://" + srv.Addr() + "/api/etl/jobs"
	tr := &http.Transport{MaxIdleConnsPerHost: intakeConcurrency, MaxConnsPerHost: intakeConcurrency}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	runCtx, cancel := context.WithTimeout(ctx, h.o.Duration)
	defer cancel()
	var (
		mu       sync.Mutex
		lat      []time.Duration
		accepted int
		failures = map[int]int{}
		wg       sync.WaitGroup
	)
	start := time.Now()
	for c := range intakeConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				req, _ := http.NewRequestWithContext(runCtx, http.MethodPost, url, bytes.NewReader([]byte(intakeBody)))
				req.Header.Set("Authorization", "Bench bench-principal-"+strconv.Itoa(c%4))
				req.Header.Set("Idempotency-Key", "bench-key-"+uuid.NewString())
				req.Header.Set("Content-Type", "application/json")
				t := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					if runCtx.Err() == nil {
						mu.Lock()
						failures[0]++
						mu.Unlock()
					}
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				d := time.Since(t)
				mu.Lock()
				if resp.StatusCode == http.StatusAccepted {
					accepted++
					lat = append(lat, d)
				} else {
					failures[resp.StatusCode]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	res.Metrics["accepted"] = float64(accepted)
	res.Metrics["accepted_per_s"] = float64(accepted) / elapsed.Seconds()
	percentiles("request", lat, res.Metrics)
	for code, n := range failures {
		res.Notes = append(res.Notes, fmt.Sprintf("%d responses with status %d (0: transport error)", n, code))
	}
	stored, err := h.count(ctx, `SELECT count(*) FROM etl_job_records WHERE job_status = $1`, pg.StatusPending)
	if err != nil {
		return []Result{res}, err
	}
	res.Metrics["stored_pending"] = float64(stored)
	if int(stored) < accepted {
		return []Result{res}, fmt.Errorf("intake: %d accepted but %d stored", accepted, stored)
	}
	return []Result{res}, nil
}
