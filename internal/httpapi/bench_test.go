package httpapi

import (
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/intake"
)

// BenchmarkSubmitThroughput is the intake load harness: 32 concurrent
// clients submit distinct keys over loopback HTTP to the real handler with
// basic authentication on, against a real database. It reports accepted
// submissions per second and latency percentiles, and fails when the
// accepted count differs from the rows in etl_job_records (a lost job).
//
//	TEST_DATABASE_URL=... go test -run '^$' -bench SubmitThroughput -benchtime 20000x ./internal/httpapi/
func BenchmarkSubmitThroughput(b *testing.B) {
	const clients = 32
	e := newBasicBenchEnv(b)
	authz := "Basic " + base64.StdEncoding.EncodeToString([]byte("bench:bench-password"))
	transport := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	body := `[{"id":"r1","name":"jane","email":"J@X.ORG","amount":"12.345"},{"id":"r2","name":"joe","amount":7}]`

	// The one password verification, outside the measurement: 32 first
	// logins at once would meet the Basic hash limit (429, issue 13).
	warm, _ := http.NewRequest("POST", e.srv.URL+"/api/etl/jobs", strings.NewReader(body))
	warm.Header.Set("Authorization", authz)
	warm.Header.Set("Idempotency-Key", "bench-key-warm-up")
	warm.Header.Set("Content-Type", "application/json")
	res, err := client.Do(warm)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusAccepted {
		b.Fatalf("warm-up: status %d", res.StatusCode)
	}

	var next, accepted atomic.Int64
	accepted.Store(1) // the warm-up
	latencies := make([][]time.Duration, clients)
	var failure atomic.Value
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				req, _ := http.NewRequest("POST", e.srv.URL+"/api/etl/jobs", strings.NewReader(body))
				req.Header.Set("Authorization", authz)
				req.Header.Set("Idempotency-Key", fmt.Sprintf("bench-key-%012d", i))
				req.Header.Set("Content-Type", "application/json")
				t0 := time.Now()
				res, err := client.Do(req)
				if err != nil {
					failure.Store(err.Error())
					return
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				latencies[c] = append(latencies[c], time.Since(t0))
				if res.StatusCode == http.StatusAccepted {
					accepted.Add(1)
				} else {
					failure.Store(fmt.Sprintf("status %d", res.StatusCode))
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if f := failure.Load(); f != nil {
		b.Fatalf("request failed: %v", f)
	}
	var all []time.Duration
	for _, l := range latencies {
		all = append(all, l...)
	}
	slices.Sort(all)
	pct := func(p float64) float64 {
		return float64(all[min(len(all)-1, int(p*float64(len(all))))].Microseconds()) / 1000
	}
	rows := e.count("SELECT count(*) FROM etl_job_records")
	if int64(rows) != accepted.Load() {
		b.Fatalf("accepted %d, rows %d: lost jobs", accepted.Load(), rows)
	}
	for _, l := range strings.Split(e.metricsText(), "\n") {
		if strings.HasPrefix(l, "mightyetl_intake_submit_batch_size_sum") || strings.HasPrefix(l, "mightyetl_intake_submit_batch_size_count") {
			b.Log(l)
		}
	}
	b.ReportMetric(float64(accepted.Load()-1)/elapsed.Seconds(), "accepted/s")
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(rows), "rows")
}

// benchResponse is a minimal http.ResponseWriter for handler benchmarks:
// a fresh header map per request (as the server gives), the body dropped.
type benchResponse struct {
	header http.Header
	status int
}

func (w *benchResponse) Header() http.Header { return w.header }
func (w *benchResponse) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *benchResponse) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return len(b), nil
}

// processCPU is the user plus system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSubmitHandler is the submit path of the intake without the
// network: 32 goroutines call the real handler (Basic authentication with
// a warm cache, the group commit, a real database) with distinct keys. It
// reports the process's CPU per accepted submission (cpu-µs/op, the
// database excluded: it is another process) and allocations, the figures
// the loopback bench's CPU budget is made of.
//
//	go test -run '^$' -bench SubmitHandler -benchmem -benchtime 20000x ./internal/httpapi/
func BenchmarkSubmitHandler(b *testing.B) {
	e := newBasicBenchEnv(b)
	h := e.srv.Config.Handler
	authz := "Basic " + base64.StdEncoding.EncodeToString([]byte("bench:bench-password"))
	body := `[{"id":"r1","name":"jane","email":"J@X.ORG","amount":"12.345"},{"id":"r2","name":"joe","amount":7}]`
	var next atomic.Int64
	var failure atomic.Value
	serve := func(i int64) {
		req := httptest.NewRequest("POST", "/api/etl/jobs", strings.NewReader(body))
		req.RemoteAddr = "127.0.0.1:40000"
		req.Header.Set("Authorization", authz)
		req.Header.Set("Idempotency-Key", fmt.Sprintf("bench-key-%012d", i))
		req.Header.Set("Content-Type", "application/json")
		w := &benchResponse{header: http.Header{}}
		h.ServeHTTP(w, req)
		if w.status != http.StatusAccepted {
			failure.Store(fmt.Sprintf("status %d", w.status))
		}
	}
	serve(-1)            // the one password verification, outside the measurement
	b.SetParallelism(16) // 32 goroutines on 2 cores
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			serve(next.Add(1))
		}
	})
	cpu := processCPU(b) - cpu0
	b.StopTimer()
	if f := failure.Load(); f != nil {
		b.Fatalf("request failed: %v", f)
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
	if rows := e.count("SELECT count(*) FROM etl_job_records"); rows != b.N+1 {
		b.Fatalf("rows %d, want %d", rows, b.N+1)
	}
}

// newBasicBenchEnv is the benchmarks' environment: the real handler with
// Basic authentication for principal "bench" (password "bench-password")
// and a discarding logger.
func newBasicBenchEnv(b *testing.B) *env {
	b.Helper()
	line, err := auth.CredentialLine("bench", []byte("bench-password"))
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "credentials")
	if err := os.WriteFile(path, []byte(line+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	basic, err := auth.NewBasic(auth.BasicOptions{CredentialsFile: path})
	if err != nil {
		b.Fatal(err)
	}
	return newEnv(b, func(o *Options, so *intake.Options) {
		o.Authenticator = basic
		o.Logger = slog.New(slog.DiscardHandler)
	})
}
