package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/console"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testio"
	"github.com/mightyetl/mightyetl/internal/testwait"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testio.AsyncCloseLeaks()...)
}

// testHashKey is the principal hash key of every test environment.
var testHashKey = []byte("0123456789abcdef0123456789abcdef-test")

// testAuth authenticates "Authorization: Test <principal>"; the principal
// "-" is unusable.
type testAuth struct{}

func (testAuth) Authenticate(r *http.Request) (string, error) {
	v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Test ")
	if !ok || v == "" {
		return "", auth.ErrUnauthenticated
	}
	if v == "-" {
		return "", auth.ErrPrincipalUnusable
	}
	return v, nil
}

func (testAuth) Challenge() string { return `Test realm="mightyetl"` }

// env is one API under test on a fresh database.
type env struct {
	t    testing.TB
	pool *pgxpool.Pool
	url  string
	svc  *intake.Service
	srv  *httptest.Server
	reg  *prometheus.Registry
	logs *testio.SyncBuffer
	opts Options
}

type envOption func(*Options, *intake.Options)

// newEnv starts the real handler over loopback HTTP on a fresh migrated
// database, with testAuth unless an option replaces it.
func newEnv(t testing.TB, options ...envOption) *env {
	t.Helper()
	pool, url := pgtest.NewDatabase(t, pgtest.Options{MaxConns: 16})
	return newEnvOn(t, pool, url, options...)
}

func newEnvOn(t testing.TB, pool *pgxpool.Pool, url string, options ...envOption) *env {
	t.Helper()
	e := &env{t: t, pool: pool, url: url, reg: prometheus.NewRegistry(), logs: &testio.SyncBuffer{}}
	m := metrics.NewIntake(e.reg)
	so := intake.Options{DB: pool, PrincipalHashKey: testHashKey, MaxBatchRecords: 1000, Metrics: m}
	o := Options{
		Authenticator:         testAuth{},
		Pool:                  pool,
		Metrics:               m,
		Gatherer:              e.reg,
		Logger:                slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		MaxPayloadBytes:       64 << 10,
		PollInterval:          1500 * time.Millisecond,
		DiagnosticJobsEnabled: true,
	}
	var svc *intake.Service // set below, before any request
	cons, err := console.New(console.Options{DB: pool, HashKey: testHashKey, Logger: o.Logger,
		Replay: func(ctx context.Context, r intake.OperatorReplayRequest) (intake.ReplayResult, error) {
			return svc.OperatorReplay(ctx, r)
		}})
	if err != nil {
		t.Fatal(err)
	}
	o.Console, o.Operators, o.PrincipalHashKey = cons, auth.NewOperators([]string{"operator"}), testHashKey
	for _, opt := range options {
		opt(&o, &so)
	}
	svc, err = intake.New(so)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop(context.Background()) })
	o.Service = svc
	h, err := NewHandler(o)
	if err != nil {
		t.Fatal(err)
	}
	e.svc, e.opts = svc, o
	e.srv = httptest.NewServer(h)
	t.Cleanup(e.srv.Close)
	return e
}

// response is a fully read HTTP response.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r response) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %q: %v", r.Body, err)
	}
}

func (r response) problemCode(t testing.TB) string {
	t.Helper()
	var p problem
	r.json(t, &p)
	return p.ErrorCode
}

// req describes one request; Principal "" sends no credentials. A Body is
// sent as Content-Type: application/json unless Header names another
// Content-Type (an empty value sends none).
type req struct {
	Method    string
	Path      string
	Principal string
	Key       string
	Body      string
	Header    map[string]string
}

func (e *env) do(r req) response {
	e.t.Helper()
	return e.send(e.request(r))
}

// request builds r against the test server: the principal's test
// credentials, the Idempotency-Key, a JSON Content-Type with a body, then
// r.Header (an empty value deletes the header).
func (e *env) request(r req) *http.Request {
	e.t.Helper()
	var body io.Reader
	if r.Body != "" {
		body = strings.NewReader(r.Body)
	}
	hr, err := http.NewRequest(r.Method, e.srv.URL+r.Path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if r.Principal != "" {
		hr.Header.Set("Authorization", "Test "+r.Principal)
	}
	if r.Key != "" {
		hr.Header.Set("Idempotency-Key", r.Key)
	}
	if r.Body != "" {
		hr.Header.Set("Content-Type", "application/json")
	}
	for k, v := range r.Header {
		if v == "" {
			hr.Header.Del(k)
			continue
		}
		hr.Header.Set(k, v)
	}
	return hr
}

func (e *env) send(hr *http.Request) response {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := e.srv.Client().Do(hr.WithContext(ctx))
	if err != nil {
		e.t.Fatalf("%s %s: %v", hr.Method, hr.URL.Path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return response{Status: res.StatusCode, Header: res.Header, Body: b}
}

// submitted is the body of a 202.
type submitted struct {
	JobRecordID string `json:"jobRecordId"`
	JobStatus   string `json:"jobStatus"`
	StatusURL   string `json:"statusUrl"`
}

// submit posts body under key for principal and requires a 202.
func (e *env) submit(principal, key, body string) (submitted, response) {
	e.t.Helper()
	res := e.do(req{Method: "POST", Path: "/api/etl/jobs", Principal: principal, Key: key, Body: body})
	if res.Status != http.StatusAccepted {
		e.t.Fatalf("submit: status %d body %s", res.Status, res.Body)
	}
	var s submitted
	res.json(e.t, &s)
	return s, res
}

// count runs a count(*) query.
func (e *env) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		e.t.Fatalf("count %q: %v", sql, err)
	}
	return n
}

// metricsText returns the /metrics exposition.
func (e *env) metricsText() string {
	e.t.Helper()
	return string(e.do(req{Method: "GET", Path: "/metrics"}).Body)
}

const sampleBody = `[{"id":"a1","name":"jane","amount":"999.9"},{"id":"a2","email":"X@Y.Z"}]`

// waitFor waits up to 30s for cond (testwait.For).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, 30*time.Second, what, cond)
}
