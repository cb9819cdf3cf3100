package faultinject

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mightyetl/mightyetl/internal/codes"
)

// stopGrace bounds a replaced process's drain after SIGTERM (its own
// MIGHTYETL_SHUTDOWN_GRACE_PERIOD is 5 s) before the harness kills it.
const stopGrace = 20 * time.Second

// Frontend is the load balancer in front of the intakes during a rolling
// replacement: an HTTP reverse proxy to one backend at a time. Switch sends
// every new request to another backend; Drain waits until no request to the
// old one is in flight, so the old intake can be stopped without a request
// lost between the proxy and it. Backend connections are not kept alive, so
// no idle connection to a stopping intake is ever reused. Safe for
// concurrent use.
type Frontend struct {
	ln        net.Listener
	srv       *http.Server
	transport *http.Transport
	served    chan struct{}

	mu       sync.Mutex
	backend  string // host:port
	proxies  map[string]*httputil.ReverseProxy
	inflight map[string]int
	errors   int // requests the proxy could not forward (answered 502)
	gaveUp   int // requests whose client went away before the answer
}

// NewFrontend listens on a free loopback port; it answers 502 until the
// first Switch.
func NewFrontend() (*Frontend, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("frontend listen: %w", err)
	}
	f := &Frontend{ln: ln, served: make(chan struct{}),
		transport: &http.Transport{DisableKeepAlives: true, ResponseHeaderTimeout: 30 * time.Second},
		proxies:   map[string]*httputil.ReverseProxy{}, inflight: map[string]int{}}
	f.srv = &http.Server{Handler: f, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() {
		defer close(f.served)
		_ = f.srv.Serve(ln)
	}()
	return f, nil
}

// URL is the frontend's base URL (http://host:port).
func (f *Frontend) URL() string { return "http://" + f.ln.Addr().String() }

// ServeHTTP forwards r to the current backend.
func (f *Frontend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	b := f.backend
	rp := f.proxies[b]
	f.inflight[b]++
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inflight[b]--
		f.mu.Unlock()
	}()
	if rp == nil {
		f.proxyError(w, r, nil)
		return
	}
	rp.ServeHTTP(w, r)
}

// proxyError answers a request the proxy could not complete. A request
// whose client gave up first (its context ended: the producers' 10 s client
// timeout on a machine loaded enough for a cancel to take that long) is not
// a forwarding failure: the reverse proxy calls this for it too, so it is
// counted apart (ClientsGaveUp) and Errors stays the requests no intake
// could be reached for.
func (f *Frontend) proxyError(w http.ResponseWriter, r *http.Request, _ error) {
	f.mu.Lock()
	if r.Context().Err() != nil {
		f.gaveUp++
	} else {
		f.errors++
	}
	f.mu.Unlock()
	w.WriteHeader(http.StatusBadGateway)
}

// Switch sends every later request to backend (host:port) and returns the
// previous backend ("" for none).
func (f *Frontend) Switch(backend string) string {
	u := &url.URL{Scheme: "http", Host: backend}
	rp := &httputil.ReverseProxy{
		Rewrite:      func(pr *httputil.ProxyRequest) { pr.SetURL(u) },
		Transport:    f.transport,
		ErrorHandler: f.proxyError,
		ErrorLog:     log.New(io.Discard, "", 0),
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.backend
	f.backend = backend
	f.proxies[backend] = rp
	return old
}

// Drain waits until no request to backend is in flight (call it after
// Switch away from backend).
func (f *Frontend) Drain(ctx context.Context, backend string, within time.Duration) error {
	return waitFor(ctx, within, 10*time.Millisecond, "requests to the old intake to finish", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.inflight[backend] == 0
	})
}

// Errors is how many requests the frontend answered 502 itself.
func (f *Frontend) Errors() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.errors
}

// ClientsGaveUp is how many requests ended because their client went
// away before the intake answered (not counted in Errors).
func (f *Frontend) ClientsGaveUp() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gaveUp
}

// Close stops listening and closes open connections.
func (f *Frontend) Close() {
	_ = f.srv.Close()
	<-f.served
	f.transport.CloseIdleConnections()
}

// Deployment is a System run as a fleet operator runs one: an intake behind
// a Frontend and workers, each a process of some Release that Replace*
// swaps for a process of another, one at a time. Its System holds the
// private PostgreSQL and NATS, the producers' view (IntakeURL is the
// frontend), the processes currently serving (Intake, Workers) and the
// harness pool. Methods are for one goroutine (the test's).
type Deployment struct {
	Sys   *System
	Front *Frontend
	// Slots are the release serving as the intake and as each worker.
	IntakeRelease  Release
	WorkerReleases []Release

	// Replacements are the stop and start times of every replacement, in
	// order.
	Replacements []Replacement

	runCtx      context.Context
	databaseURL string
	credsFile   string
	all         []*Process // every process started, for the checker
	generation  int
}

// Replacement is how long one replacement took: Stop from SIGTERM to the
// old process's exit (stopGrace means it was killed), Start from the new
// process's start to its /readyz answering 200.
type Replacement struct {
	Slot        string // "intake", "worker1", ...
	Release     string // the new process's release
	Stop, Start time.Duration
}

// StartDeployment starts PostgreSQL and NATS, applies rel's migrations
// with rel's etlctl, and starts rel's intake (behind a Frontend) and
// workers. On error it stops what it started.
func StartDeployment(ctx context.Context, cfg Config, rel Release) (d *Deployment, err error) {
	if cfg.Workers == 0 {
		cfg.Workers = 2
	}
	if cfg.HTTPPrincipals == 0 {
		cfg.HTTPPrincipals = 3
	}
	if cfg.NATSPrincipals == 0 {
		cfg.NATSPrincipals = 2
	}
	if _, err := findPGTool("initdb"); err != nil {
		return nil, err
	}
	if _, err := findNATSServer(); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &System{cfg: cfg, cancel: cancel, client: &http.Client{Timeout: 5 * time.Second},
		Prefix: "upgrade" + randomHex(4), HashKey: []byte(randomHex(32)), Bins: rel.Bins}
	d = &Deployment{Sys: s, runCtx: runCtx}
	defer func() {
		if err != nil {
			d.Stop(context.WithoutCancel(ctx))
			d = nil
		}
	}()
	if s.PG, err = NewPostgres(ctx); err != nil {
		return d, err
	}
	if err = s.PG.Start(ctx); err != nil {
		return d, err
	}
	d.databaseURL = s.PG.URL(databaseName)
	if _, err = d.Migrate(ctx, rel, "up"); err != nil {
		return d, err
	}
	if s.DB, err = pgxpool.New(ctx, d.databaseURL); err != nil {
		return d, fmt.Errorf("harness pool: %w", err)
	}
	if s.NATS, err = NewNATSServer(cfg.RunDir); err != nil {
		return d, err
	}
	if err = s.NATS.Start(ctx); err != nil {
		return d, err
	}
	d.credsFile = filepath.Join(cfg.RunDir, "credentials")
	if s.HTTP, err = writeCredentials(d.credsFile, cfg.HTTPPrincipals); err != nil {
		return d, err
	}
	for i := range cfg.NATSPrincipals {
		s.NATSNames = append(s.NATSNames, "up-nats-"+strconv.Itoa(i))
	}
	if d.Front, err = NewFrontend(); err != nil {
		return d, err
	}
	s.IntakeURL = d.Front.URL()
	if err = d.ReplaceIntake(ctx, rel); err != nil {
		return d, err
	}
	s.Workers = make([]*Process, cfg.Workers)
	s.WorkerURLs = make([]string, cfg.Workers)
	d.WorkerReleases = make([]Release, cfg.Workers)
	for i := range cfg.Workers {
		if err = d.ReplaceWorker(ctx, i, rel); err != nil {
			return d, err
		}
	}
	return d, nil
}

// Migrate runs rel's `etlctl migrate <args>` against the database and
// returns its output.
func (d *Deployment) Migrate(ctx context.Context, rel Release, args ...string) (string, error) {
	out, err := d.Sys.command(ctx, rel.Bins.Etlctl, append([]string{"migrate"}, args...), "DATABASE_URL="+d.databaseURL).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s etlctl migrate %s: %v: %s", rel.Name, strings.Join(args, " "), err, lastLines(out, 5))
	}
	return string(out), nil
}

// SchemaVersion is the database's applied schema version, read as goose
// and pg.CheckCompatibility read it.
func (d *Deployment) SchemaVersion(ctx context.Context) (int64, error) {
	var v int64
	if err := d.Sys.DB.QueryRow(ctx, `SELECT coalesce(max(version_id), 0) FROM mightyetl_schema_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

func (d *Deployment) processName(kind string, rel Release) string {
	d.generation++
	return fmt.Sprintf("%s-%s-g%d", kind, rel.Name, d.generation)
}

// ReplaceIntake starts rel's intake on a new port, waits until its /readyz
// answers 200, switches the frontend to it, waits for the requests in
// flight to the old intake to finish, and stops the old one (SIGTERM, its
// graceful drain).
func (d *Deployment) ReplaceIntake(ctx context.Context, rel Release) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	name := d.processName("intake", rel)
	readyz := "http://" + addr + "/readyz"
	p := NewProcess(name, rel.Bins.Intake, d.Sys.intakeEnv(d.databaseURL, d.credsFile, addr),
		filepath.Join(d.Sys.cfg.RunDir, name+".log"),
		func(ctx context.Context) bool { return httpOK(ctx, d.Sys.client, readyz) })
	d.all = append(d.all, p)
	r := Replacement{Slot: "intake", Release: rel.Name}
	at := time.Now()
	if err := p.Start(d.runCtx, readyWithin); err != nil {
		return err
	}
	r.Start = time.Since(at)
	old, oldProc := d.Front.Switch(addr), d.Sys.Intake
	d.Sys.Intake, d.IntakeRelease = p, rel
	if oldProc != nil {
		if err := d.Front.Drain(ctx, old, time.Minute); err != nil {
			return err
		}
		at = time.Now()
		oldProc.Stop(stopGrace)
		r.Stop = time.Since(at)
	}
	d.Replacements = append(d.Replacements, r)
	return nil
}

// ReplaceWorker stops worker slot i (SIGTERM: it stops claiming, finishes
// or releases its running jobs) and starts rel's worker in its place,
// waiting until its /readyz answers 200.
func (d *Deployment) ReplaceWorker(ctx context.Context, i int, rel Release) error {
	r := Replacement{Slot: "worker" + strconv.Itoa(i+1), Release: rel.Name}
	if old := d.Sys.Workers[i]; old != nil {
		at := time.Now()
		old.Stop(stopGrace)
		r.Stop = time.Since(at)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	name := d.processName("worker"+strconv.Itoa(i+1), rel)
	base := "http://" + addr
	p := NewProcess(name, rel.Bins.Worker, d.Sys.workerEnv("upgrade-"+name, d.databaseURL, addr),
		filepath.Join(d.Sys.cfg.RunDir, name+".log"),
		func(ctx context.Context) bool { return httpOK(ctx, d.Sys.client, base+"/readyz") })
	d.all = append(d.all, p)
	d.Sys.Workers[i], d.Sys.WorkerURLs[i], d.WorkerReleases[i] = p, base, rel
	at := time.Now()
	err = p.Start(d.runCtx, readyWithin)
	r.Start = time.Since(at)
	d.Replacements = append(d.Replacements, r)
	return err
}

// Serving probes /readyz of every current process (a live
// pg.CheckCompatibility of the binary against the database's schema) and
// returns, for those that did not answer 200, the process name and its
// fixed reason ("schema version incompatible", "database unreachable", or
// the transport error's class).
func (d *Deployment) Serving(ctx context.Context) (notReady []string) {
	bases := map[*Process]string{d.Sys.Intake: d.IntakeBase()}
	for i, w := range d.Sys.Workers {
		bases[w] = d.Sys.WorkerURLs[i]
	}
	for _, p := range d.Sys.Processes() {
		if reason := d.readiness(ctx, bases[p]+"/readyz"); reason != "" {
			notReady = append(notReady, p.Name+" ("+reason+")")
		}
	}
	return notReady
}

// IntakeBase is the current intake's own base URL (not the frontend's).
func (d *Deployment) IntakeBase() string {
	d.Front.mu.Lock()
	defer d.Front.mu.Unlock()
	return "http://" + d.Front.backend
}

// readiness GETs a /readyz URL and returns "" for 200, else its first
// line (the health package's fixed reason) or "no answer".
func (d *Deployment) readiness(ctx context.Context, url string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "bad request"
	}
	resp, err := d.Sys.client.Do(req)
	if err != nil {
		return "no answer"
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return strconv.Itoa(resp.StatusCode) + " " + line
}

// AllProcesses is every process the deployment started, replaced ones
// included.
func (d *Deployment) AllProcesses() []*Process { return append([]*Process(nil), d.all...) }

// WorkerFinished reads worker slot i's /metrics and returns how many jobs
// it brought to a terminal state (mightyetl_worker_outcomes_total of
// succeeded, failed and cancelled).
func (d *Deployment) WorkerFinished(ctx context.Context, i int) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.Sys.WorkerURLs[i]+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := d.Sys.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("worker metrics: status %d", resp.StatusCode)
	}
	var total float64
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 8<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		switch name {
		case `mightyetl_worker_outcomes_total{outcome="succeeded"}`,
			`mightyetl_worker_outcomes_total{outcome="failed"}`,
			`mightyetl_worker_outcomes_total{outcome="cancelled"}`:
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return 0, fmt.Errorf("worker metrics: %w", err)
			}
			total += v
		}
	}
	return total, sc.Err()
}

// Stop stops every process, the frontend, NATS and PostgreSQL (removing
// its directory). Safe on a partly started deployment.
func (d *Deployment) Stop(ctx context.Context) {
	for _, p := range d.all {
		p.Stop(10 * time.Second)
	}
	d.Sys.Stop(ctx)
	if d.Front != nil {
		d.Front.Close()
	}
}

// FailedJobs counts the FAILED jobs by failure code and says how many of
// them no submission asked for: only a diagnostic job asking to fail
// permanently (etl_diagnostic_requested_failure) or transiently on every
// attempt (etl_target_unavailable) may fail; any other failure, and
// etl_worker_attempts_exhausted above all, came from the deployment.
func FailedJobs(ctx context.Context, db *pgxpool.Pool, ledger *Ledger) (byCode map[string]int, unasked int, err error) {
	asked := map[string]string{}
	for _, s := range ledger.Submissions() {
		st := s.State()
		if !st.Acked || len(st.JobIDs) != 1 {
			continue
		}
		switch s.Kind {
		case KindPermanent:
			asked[st.JobIDs[0]] = codes.DiagnosticRequestedFailure
		case KindTransient:
			asked[st.JobIDs[0]] = codes.TargetUnavailable
		}
	}
	rs, err := db.Query(ctx, `SELECT job_record_id::text, coalesce(failure_code::text, '') FROM etl_job_records WHERE job_status = 'FAILED'`)
	if err != nil {
		return nil, 0, fmt.Errorf("read failed jobs: %w", err)
	}
	defer rs.Close()
	byCode = map[string]int{}
	for rs.Next() {
		var id, code string
		if err := rs.Scan(&id, &code); err != nil {
			return nil, 0, fmt.Errorf("read failed jobs: %w", err)
		}
		byCode[code]++
		if want, ok := asked[id]; !ok || want != code {
			unasked++
		}
	}
	if err := rs.Err(); err != nil {
		return nil, 0, fmt.Errorf("read failed jobs: %w", err)
	}
	return byCode, unasked, nil
}

// ErrNoProgress is wrapped by WaitFinished when a worker finished no job
// within its deadline.
var ErrNoProgress = errors.New("no progress")

// WaitFinished waits until every worker slot in slots has finished more
// jobs than since[slot], within the deadline.
func (d *Deployment) WaitFinished(ctx context.Context, since map[int]float64, within time.Duration) error {
	err := waitFor(ctx, within, 100*time.Millisecond, "each worker to finish a job", func() bool {
		for i, base := range since {
			n, err := d.WorkerFinished(ctx, i)
			if err != nil || n <= base {
				return false
			}
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoProgress, err)
	}
	return nil
}
