package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
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
	if err := svc.Start(ctx); err != nil {
		return []Result{res}, err
	}
	defer func() { _ = svc.Stop(context.WithoutCancel(ctx)) }()
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
	res.Settings["load_client"] = h.o.IntakeClient
	load := h.postLoad(ctx, srv.Addr(), h.o.Duration, func(c int) string { return "Bench bench-principal-" + strconv.Itoa(c%4) })
	accepted := load.report(&res)
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

// postLoad has intakeConcurrency clients of the -intake-client kind POST
// intakeBody to /api/etl/jobs on addr (host:port) for dur, each request
// with a fresh Idempotency-Key; authorization(c) is client c's
// Authorization value.
func (h *harness) postLoad(ctx context.Context, addr string, dur time.Duration, authorization func(c int) string) httpLoad {
	if h.o.IntakeClient == loadClientNetHTTP {
		client, closeClient := newLoadClient()
		defer closeClient()
		return postLoad(ctx, client, "http://"+addr+"/api/etl/jobs", dur, func(req *http.Request, c int) {
			req.Header.Set("Authorization", authorization(c))
		})
	}
	return rawPostLoad(ctx, addr, "/api/etl/jobs", []byte(intakeBody), dur, authorization)
}

// newLoadClient is an HTTP client with a connection per load client; close
// drops its idle connections.
func newLoadClient() (*http.Client, func()) {
	tr := &http.Transport{MaxIdleConnsPerHost: intakeConcurrency, MaxConnsPerHost: intakeConcurrency}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}, tr.CloseIdleConnections
}

// httpLoad is what postLoad observed.
type httpLoad struct {
	accepted int
	lat      []time.Duration // of accepted (202) requests
	failures map[int]int     // other responses by status; 0: transport error
	elapsed  time.Duration
}

// postLoad has intakeConcurrency clients POST intakeBody to url, each with a
// fresh Idempotency-Key, for dur; authorize sets client c's credentials.
func postLoad(ctx context.Context, client *http.Client, url string, dur time.Duration, authorize func(req *http.Request, c int)) httpLoad {
	runCtx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	var (
		mu   sync.Mutex
		out  = httpLoad{failures: map[int]int{}}
		wg   sync.WaitGroup
		body = []byte(intakeBody)
	)
	start := time.Now()
	for c := range intakeConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				t := time.Now()
				status, err := postJob(runCtx, client, url, body, func(req *http.Request) { authorize(req, c) })
				if err != nil {
					if runCtx.Err() == nil {
						mu.Lock()
						out.failures[0]++
						mu.Unlock()
					}
					return
				}
				d := time.Since(t)
				mu.Lock()
				if status == http.StatusAccepted {
					out.accepted++
					out.lat = append(out.lat, d)
				} else {
					out.failures[status]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	out.elapsed = time.Since(start)
	return out
}

// postJob submits body once with a fresh Idempotency-Key and returns the
// response status (the body is drained, never kept or logged).
func postJob(ctx context.Context, client *http.Client, url string, body []byte, authorize func(*http.Request)) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	authorize(req)
	req.Header.Set("Idempotency-Key", "bench-key-"+uuid.NewString())
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// report adds accepted, accepted_per_s, request latencies and a note per
// other status to res, and returns the accepted count.
func (l httpLoad) report(res *Result) int {
	res.Metrics["accepted"] = float64(l.accepted)
	res.Metrics["accepted_per_s"] = float64(l.accepted) / l.elapsed.Seconds()
	percentiles("request", l.lat, res.Metrics)
	codes := make([]int, 0, len(l.failures))
	for code := range l.failures {
		codes = append(codes, code)
	}
	sort.Ints(codes)
	for _, code := range codes {
		res.Notes = append(res.Notes, fmt.Sprintf("%d responses with status %d (0: transport error)", l.failures[code], code))
	}
	return l.accepted
}
