package httpapi

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// TestBodyBufferGrowsWithArrivals: a declared Content-Length alone pins no
// memory: the buffer starts small and grows only as bytes arrive.
func TestBodyBufferGrowsWithArrivals(t *testing.T) {
	b, err := readLimited(strings.NewReader("[]"), 64<<20, 64<<20)
	if err != nil || string(b) != "[]" {
		t.Fatalf("read %q %v", b, err)
	}
	if cap(b) > 1<<20 {
		t.Fatalf("a 2-byte body declared as 64 MiB holds a %d-byte buffer", cap(b))
	}
}

// pausingBody yields head, then blocks until release is closed, then EOF.
// paused is closed once the reader of head came back for more, i.e. the
// server has taken head into its budget.
type pausingBody struct {
	head    []byte
	paused  chan struct{}
	release chan struct{}
	once    sync.Once
}

func (p *pausingBody) Read(b []byte) (int, error) {
	if len(p.head) > 0 {
		n := copy(b, p.head)
		p.head = p.head[n:]
		return n, nil
	}
	p.once.Do(func() { close(p.paused) })
	<-p.release
	return 0, io.EOF
}

// TestInFlightByteBudget: the request body bytes held at once across
// requests are bounded (64 MiB by default): while one request holds 40 MB
// of body, a second 40 MB body is refused with 503 etl_server_busy and
// Retry-After instead of being buffered too; once the first request ends,
// its bytes are free again.
func TestInFlightByteBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *Options, _ *intake.Options) { o.MaxPayloadBytes = 64 << 20 })
	h, err := NewHandler(e.opts)
	if err != nil {
		t.Fatal(err)
	}
	const size = 40 << 20
	newReq := func(key string, body io.Reader, length int64) *http.Request {
		hr, _ := http.NewRequest("POST", "/api/etl/jobs", body)
		hr.ContentLength = length
		hr.Header.Set("Authorization", "Test alice")
		hr.Header.Set("Idempotency-Key", key)
		hr.Header.Set("Content-Type", "application/json")
		return hr
	}
	first := &pausingBody{head: make([]byte, size), paused: make(chan struct{}), release: make(chan struct{})}
	firstDone := make(chan int)
	go func() {
		rec := newRecorder()
		h.ServeHTTP(rec, newReq("key-budget-000000001", first, -1))
		firstDone <- rec.status
	}()
	select {
	case <-first.paused:
	case <-time.After(30 * time.Second):
		close(first.release)
		t.Fatal("the first body was not read within 30s")
	}

	rec := newRecorder()
	h.ServeHTTP(rec, newReq("key-budget-000000002", strings.NewReader(strings.Repeat(" ", size)), size))
	mw := rec.ResponseWriter.(*memoryWriter)
	if rec.status != http.StatusServiceUnavailable || !strings.Contains(mw.body.String(), `"errorCode":"etl_server_busy"`) || mw.h.Get("Retry-After") != "1" {
		t.Errorf("second body while the first holds %d bytes: status %d body %.200s Retry-After %q", size, rec.status, mw.body.String(), mw.h.Get("Retry-After"))
	}

	close(first.release)
	if status := <-firstDone; status != http.StatusBadRequest { // 40 MB of zero bytes is not JSON
		t.Errorf("first request: %d", status)
	}
	res := e.do(req{Method: "POST", Path: "/api/etl/jobs", Principal: "alice", Key: "key-budget-000000003", Body: sampleBody})
	if res.Status != http.StatusAccepted {
		t.Errorf("after the first request ended: %d %s", res.Status, res.Body)
	}
}

// panicAuth panics for "Authorization: Test boom" and authenticates as
// testAuth otherwise.
type panicAuth struct{ testAuth }

const panicSecret = "secret-payload-in-a-panic"

func (p panicAuth) Authenticate(r *http.Request) (string, error) {
	if r.Header.Get("Authorization") == "Test boom" {
		panic(panicSecret)
	}
	return p.testAuth.Authenticate(r)
}

// TestHandlerPanicBecomesProblem: a handler panic is answered 500
// etl_internal_error with no-store, logged once at error level without the
// panic value, and counted by route; the server keeps serving.
func TestHandlerPanicBecomesProblem(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *Options, _ *intake.Options) { o.Authenticator = panicAuth{} })
	res := e.do(req{Method: "GET", Path: "/api/etl/jobs", Principal: "boom"})
	checkProblem(t, res, "/api/etl/jobs", 500, "etl_internal_error")
	logs := e.logs.String()
	if !strings.Contains(logs, `"msg":"http handler panic"`) || !strings.Contains(logs, `"route":"GET /api/etl/jobs"`) {
		t.Errorf("no panic log line:\n%s", logs)
	}
	if strings.Contains(logs, panicSecret) || strings.Contains(logs, "boom") {
		t.Errorf("the log holds the panic value or the principal:\n%s", logs)
	}
	if m := e.metricsText(); !strings.Contains(m, `mightyetl_http_handler_panics_total{route="GET /api/etl/jobs"} 1`) {
		t.Errorf("panic not counted:\n%s", m)
	}
	if res := e.do(req{Method: "GET", Path: "/api/etl/jobs", Principal: "alice"}); res.Status != 200 {
		t.Errorf("after a panic: %d", res.Status)
	}
}

// TestProcessCannotStarveStatus: /process calls that hold their
// transaction (here: waiting on a ledger key another transaction holds)
// take at most their share of the request pool, so another principal's
// status request still finds a connection. The request pool has 6
// connections and /process runs at most 4 transactions (the default); 8
// calls arrive.
func TestProcessCannotStarveStatus(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t, pgtest.Options{MaxConns: 6})
	e := newEnvOn(t, pool, url)
	ctx := context.Background()
	s, _ := e.submit("bob", "key-starve-status-01", sampleBody)

	monitor := pgtest.NewPool(t, url, 2)
	const key = "sync-starve-key-0001"
	scope := intakeScope("alice")
	blocker, err := monitor.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Rollback(context.WithoutCancel(ctx)) }()
	if _, _, err := pg.ClaimLedgerEntry(ctx, blocker, pg.LedgerEntry{PrincipalScopeHash: scope,
		IdempotencyKeyHash: intake.SyncProcessKeyHash(scope, key), RequestDigest: intake.RequestDigest([]byte(sampleBody)),
		ResponseText: "held"}); err != nil {
		t.Fatal(err)
	}

	const calls = 8
	var wg sync.WaitGroup
	statuses := make([]int, calls)
	for i := range calls {
		wg.Go(func() {
			statuses[i] = e.do(req{Method: "POST", Path: "/api/etl/process", Principal: "alice", Key: key, Body: sampleBody}).Status
		})
	}
	waitFor(t, "4 /process transactions waiting on the held ledger key", func() bool {
		var n int
		if err := monitor.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND application_name = 'mightyetl-test'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n >= 4
	})

	got := make(chan int, 1)
	go func() {
		hr, _ := http.NewRequest("GET", e.srv.URL+"/api/etl/jobs/"+s.JobRecordID, nil)
		hr.Header.Set("Authorization", "Test bob")
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		res, err := e.srv.Client().Do(hr.WithContext(sctx))
		if err != nil {
			got <- 0
			return
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		got <- res.StatusCode
	}()
	status := <-got
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if status != http.StatusOK {
		t.Fatalf("bob's status while alice's /process calls wait: %d (0: no answer within 20s)", status)
	}
	for i, st := range statuses {
		if st != http.StatusOK {
			t.Errorf("process call %d: %d", i, st)
		}
	}
}
