package clientcontract_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/mightyetl/mightyetl/client"
	"github.com/mightyetl/mightyetl/internal/app"
	"github.com/mightyetl/mightyetl/internal/app/apptest"
	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/natstest"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testio"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testio.AsyncCloseLeaks()...)
}

const (
	testUser     = "alice"
	testPassword = "correct-horse-battery-staple"
)

// stack is a real intake (HTTP and the NATS request consumer), an outbox
// relay and, once started, a worker on a fresh database and a private NATS
// subject prefix, like `etlctl dev`.
type stack struct {
	t       *testing.T
	pool    *pgxpool.Pool
	env     map[string]string
	srv     *httptest.Server
	natsURL string
	prefix  string
	// wrap, when set, sees every HTTP request before the intake.
	wrap atomic.Pointer[func(http.ResponseWriter, *http.Request, http.Handler)]

	mu     sync.Mutex
	worker *app.WorkerProcess
}

type stackOption func(env map[string]string)

// newStack starts the intake; withWorker also starts a worker.
func newStack(t *testing.T, withWorker bool, opts ...stackOption) *stack {
	t.Helper()
	pool, dbURL := pgtest.NewDatabase(t, pgtest.Options{MaxConns: 4})
	dir := t.TempDir()
	line, err := auth.CredentialLine(testUser, []byte(testPassword))
	if err != nil {
		t.Fatal(err)
	}
	line2, err := auth.CredentialLine("bob", []byte(testPassword))
	if err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(dir, "credentials")
	if err := os.WriteFile(creds, []byte(line+"\n"+line2+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &stack{t: t, pool: pool, natsURL: natstest.URL(t), prefix: natstest.Prefix(t)}
	s.env = map[string]string{
		"DATABASE_URL":                      dbURL,
		"MIGHTYETL_AUTH_MODE":               "basic",
		"MIGHTYETL_BASIC_CREDENTIALS_FILE":  creds,
		"MIGHTYETL_PRINCIPAL_HASH_KEY":      "0123456789abcdef0123456789abcdef-client-test",
		"MIGHTYETL_DIAGNOSTIC_JOBS_ENABLED": "true",
		"MIGHTYETL_NATS_REQUESTS_ENABLED":   "true",
		"NATS_URL":                          s.natsURL,
		"MIGHTYETL_NATS_SUBJECT_PREFIX":     s.prefix,
		"MIGHTYETL_WORKER_POLL_INTERVAL":    "1s",
		"MIGHTYETL_MAX_PAYLOAD_BYTES":       "65536",
		"MIGHTYETL_MAX_BATCH_RECORDS":       "50",
		"MIGHTYETL_INTAKE_POOL_SIZE":        "4",
		"MIGHTYETL_SHUTDOWN_GRACE_PERIOD":   "5s",
		"MIGHTYETL_WORKER_CONCURRENCY":      "2",
	}
	for _, o := range opts {
		o(s.env)
	}
	getenv := func(k string) string { return s.env[k] }
	in := apptest.Intake(t, getenv, "mightyetl-client-test")
	h := in.Server.Handler()
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f := s.wrap.Load(); f != nil {
			(*f)(w, r, h)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(s.srv.Close)
	// The API is served by httptest (wrappable); only the bridge starts.
	bridge := in.Bridge
	if err := bridge.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = bridge.Stop(ctx)
	})
	if withWorker {
		s.startWorker()
	}
	return s
}

// startWorker starts the stack's worker (once); it stops at cleanup.
func (s *stack) startWorker() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.worker != nil {
		return
	}
	wp := apptest.WorkerProcess(s.t, func(k string) string { return s.env[k] })
	if err := wp.Start(context.Background()); err != nil {
		s.t.Fatal(err)
	}
	s.worker = wp
}

// client returns a client of principal alice, with opts.
func (s *stack) client(opts ...client.Option) *client.Client {
	s.t.Helper()
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}}
	s.t.Cleanup(hc.CloseIdleConnections)
	all := append([]client.Option{client.WithBasicAuth(testUser, testPassword), client.WithHTTPClient(hc)}, opts...)
	c, err := client.New(s.srv.URL, all...)
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

// setWrap installs a request interceptor in front of the intake.
func (s *stack) setWrap(f func(http.ResponseWriter, *http.Request, http.Handler)) {
	if f == nil {
		s.wrap.Store(nil)
		return
	}
	s.wrap.Store(&f)
}

// countJobs is the number of jobs in the database.
func (s *stack) countJobs() int {
	s.t.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM etl_job_records`).Scan(&n); err != nil {
		s.t.Fatal(err)
	}
	return n
}

// counting is a RoundTripper that counts answers by status.
type counting struct {
	mu     sync.Mutex
	status map[int]int
	reqs   []string
	next   http.RoundTripper
}

func newCounting() *counting {
	return &counting{status: map[int]int{}, next: &http.Transport{}}
}

func (c *counting) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := c.next.RoundTrip(r)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reqs = append(c.reqs, r.Method+" "+r.URL.RequestURI())
	if err == nil {
		c.status[res.StatusCode]++
	}
	return res, err
}

func (c *counting) count(status int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status[status]
}

func (c *counting) requests() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.reqs...)
}
