package faultinject

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mightyetl/mightyetl/internal/auth"
)

// Settings of the system under test. Leases are short so that a killed
// worker's jobs come back within seconds; everything else is the product
// default unless noted.
const (
	databaseName      = "mightyetl"
	leaseDuration     = "6s"
	leaseRenew        = "2s"
	leaseSafetyMargin = "2s"
	workerPoll        = "250ms"
	outboxPoll        = "250ms"
	workerConcurrency = "8"
	// maxAttempts leaves room for several lost leases of one job (its
	// worker killed, its connection reset) before it fails exhausted.
	maxAttempts = 8
	// readyWithin bounds a process start (a start while PostgreSQL is
	// down is retried by the supervisor until it is back).
	readyWithin = 90 * time.Second
)

// Principal is one Basic-auth principal of the intake.
type Principal struct {
	Name          string
	Authorization string // the Authorization header value
}

// Config says where the system's files go and how many workers run.
type Config struct {
	ModuleDir string // the module root (holds go.mod), for go build
	RunDir    string // binaries, logs, NATS store; kept when a run fails
	Workers   int    // worker processes; zero means 3
	// HTTPPrincipals and NATSPrincipals are how many principals submit over
	// each path; zero means 3 and 2.
	HTTPPrincipals, NATSPrincipals int
	// Replication gives PostgreSQL a streaming standby (failover.go);
	// zero means none.
	Replication Replication
	// NATSNodes above 1 runs a JetStream cluster of that many nodes
	// (natscluster.go) instead of one server, with the streams at that
	// many replicas; zero means one server.
	NATSNodes int
	// WorkerEnv are extra NAME=value settings of every worker (e.g.
	// MIGHTYETL_CHUNK_RECORDS), after the harness's own.
	WorkerEnv []string
}

// System is the whole deployment under test: a private PostgreSQL, a
// private NATS server, the intake (HTTP API, request consumer, outbox
// relay), the workers behind a fault proxy to the database, and a direct
// pool for the harness's own queries. Start it with StartSystem and stop it
// with Stop.
type System struct {
	cfg        Config
	Bins       Binaries
	PG         *Postgres
	Standby    *Postgres // nil unless Config.Replication
	NATS       *NATSServer
	Proxy      *Proxy
	Intake     *Process
	Workers    []*Process
	IntakeURL  string   // http://host:port
	WorkerURLs []string // metrics listeners, http://host:port
	Prefix     string   // NATS subject prefix
	HashKey    []byte   // MIGHTYETL_PRINCIPAL_HASH_KEY
	HTTP       []Principal
	NATSNames  []string // principals (subject tokens) of NATS producers
	DB         *pgxpool.Pool
	cancel     context.CancelFunc
	client     *http.Client

	// NATSCluster replaces NATS when Config.NATSNodes > 1 (NATS is nil).
	NATSCluster *NATSCluster
}

// StartSystem builds the binaries and starts everything. On error it stops
// what it started.
func StartSystem(ctx context.Context, cfg Config) (s *System, err error) {
	if cfg.Workers == 0 {
		cfg.Workers = 3
	}
	if cfg.HTTPPrincipals == 0 {
		cfg.HTTPPrincipals = 3
	}
	if cfg.NATSPrincipals == 0 {
		cfg.NATSPrincipals = 2
	}
	// Look the external tools up first: a missing one fails in one line
	// before anything is built.
	if _, err := findPGTool("initdb"); err != nil {
		return nil, err
	}
	if _, err := findNATSServer(); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s = &System{cfg: cfg, cancel: cancel, client: &http.Client{Timeout: 5 * time.Second},
		Prefix: "faultinject" + randomHex(4), HashKey: []byte(randomHex(32))}
	defer func() {
		if err != nil {
			s.Stop(context.WithoutCancel(ctx))
			s = nil
		}
	}()
	if s.Bins, err = BuildBinaries(ctx, cfg.ModuleDir, filepath.Join(cfg.RunDir, "bin")); err != nil {
		return s, err
	}
	if s.PG, err = NewPostgres(ctx); err != nil {
		return s, err
	}
	if cfg.Replication != ReplicationNone {
		if err = s.PG.EnableReplication(); err != nil {
			return s, err
		}
	}
	if err = s.PG.Start(ctx); err != nil {
		return s, err
	}
	if cfg.Replication != ReplicationNone {
		if err = s.startStandby(ctx); err != nil {
			return s, err
		}
	}
	directURL := s.intakeDatabaseURL()
	if out, merr := s.command(ctx, s.Bins.Etlctl, []string{"migrate", "up"}, "DATABASE_URL="+directURL).CombinedOutput(); merr != nil {
		return s, fmt.Errorf("etlctl migrate up: %v: %s", merr, lastLines(out, 5))
	}
	if s.DB, err = pgxpool.New(ctx, directURL); err != nil {
		return s, fmt.Errorf("harness pool: %w", err)
	}
	if err = s.startNATS(ctx); err != nil {
		return s, err
	}
	if s.Proxy, err = NewProxy(s.PG.Addr()); err != nil {
		return s, err
	}
	credsFile := filepath.Join(cfg.RunDir, "credentials")
	if s.HTTP, err = writeCredentials(credsFile, cfg.HTTPPrincipals); err != nil {
		return s, err
	}
	for i := range cfg.NATSPrincipals {
		s.NATSNames = append(s.NATSNames, "fi-nats-"+strconv.Itoa(i))
	}
	if err = s.startIntake(runCtx, directURL, credsFile); err != nil {
		return s, err
	}
	workerURL := s.workerDatabaseURL()
	for i := range cfg.Workers {
		if err = s.startWorker(runCtx, i, workerURL); err != nil {
			return s, err
		}
	}
	return s, nil
}

func (s *System) startIntake(ctx context.Context, databaseURL, credsFile string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s.IntakeURL = "http://" + addr
	env := s.intakeEnv(databaseURL, credsFile, addr)
	readyz := s.IntakeURL + "/readyz"
	s.Intake = NewProcess("intake", s.Bins.Intake, env, filepath.Join(s.cfg.RunDir, "intake.log"),
		func(ctx context.Context) bool { return httpOK(ctx, s.client, readyz) })
	return s.Intake.Start(ctx, readyWithin)
}

// intakeEnv is the intake's environment: databaseURL, the Basic credentials
// file and the HTTP listen address.
func (s *System) intakeEnv(databaseURL, credsFile, addr string) []string {
	return append(s.env(
		"DATABASE_URL="+databaseURL,
		"MIGHTYETL_HTTP_ADDR="+addr,
		"MIGHTYETL_AUTH_MODE=basic",
		"MIGHTYETL_BASIC_CREDENTIALS_FILE="+credsFile,
		"MIGHTYETL_PRINCIPAL_HASH_KEY="+string(s.HashKey),
		"MIGHTYETL_MAX_ATTEMPTS="+strconv.Itoa(maxAttempts),
		"MIGHTYETL_DIAGNOSTIC_JOBS_ENABLED=true",
		"MIGHTYETL_WORKER_POLL_INTERVAL="+workerPoll,
		"MIGHTYETL_SHUTDOWN_GRACE_PERIOD=5s",
		"MIGHTYETL_NATS_SUBJECT_PREFIX="+s.Prefix,
		"MIGHTYETL_NATS_REQUESTS_ENABLED=true",
		"MIGHTYETL_OUTBOX_POLL_INTERVAL="+outboxPoll,
	), s.natsEnv()...)
}

func (s *System) startWorker(ctx context.Context, i int, databaseURL string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	name := "worker-" + strconv.Itoa(i+1)
	env := s.workerEnv("faultinject-"+name, databaseURL, addr)
	base := "http://" + addr
	s.WorkerURLs = append(s.WorkerURLs, base)
	p := NewProcess(name, s.Bins.Worker, env, filepath.Join(s.cfg.RunDir, name+".log"),
		func(ctx context.Context) bool { return httpOK(ctx, s.client, base+"/healthz") })
	s.Workers = append(s.Workers, p)
	return p.Start(ctx, readyWithin)
}

// workerEnv is a worker's environment: its worker id, databaseURL and the
// metrics listen address.
func (s *System) workerEnv(workerID, databaseURL, addr string) []string {
	return append(s.env(
		"DATABASE_URL="+databaseURL,
		"MIGHTYETL_WORKER_ID="+workerID,
		"MIGHTYETL_WORKER_CONCURRENCY="+workerConcurrency,
		"MIGHTYETL_WORKER_POLL_INTERVAL="+workerPoll,
		"MIGHTYETL_LEASE_DURATION="+leaseDuration,
		"MIGHTYETL_LEASE_RENEW_INTERVAL="+leaseRenew,
		"MIGHTYETL_LEASE_SAFETY_MARGIN="+leaseSafetyMargin,
		"MIGHTYETL_RETRY_BASE_DELAY=100ms",
		"MIGHTYETL_RETRY_MAX_DELAY=1s",
		"MIGHTYETL_SHUTDOWN_GRACE_PERIOD=5s",
		"MIGHTYETL_METRICS_ADDR="+addr,
		"MIGHTYETL_NATS_SUBJECT_PREFIX="+s.Prefix,
	), append(s.natsEnv(), s.cfg.WorkerEnv...)...)
}

// env is the harness's environment without any mightyETL, database or NATS
// setting (a developer's or CI's own must not leak in), plus extra.
func (s *System) env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "MIGHTYETL_") || strings.HasPrefix(name, "TEST_") ||
			name == "DATABASE_URL" || name == "NATS_URL" || strings.HasPrefix(name, "PG") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

func (s *System) command(ctx context.Context, bin string, args []string, extra ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = s.env(extra...)
	return cmd
}

// Processes is the intake followed by the workers.
func (s *System) Processes() []*Process {
	return append([]*Process{s.Intake}, s.Workers...)
}

// MetricsURLs maps each process name to the base URL serving its /metrics.
func (s *System) MetricsURLs() map[string]string {
	m := map[string]string{"intake": s.IntakeURL}
	for i, w := range s.Workers {
		m[w.Name] = s.WorkerURLs[i]
	}
	return m
}

// Stop stops the product processes (SIGTERM), NATS, the proxy and
// PostgreSQL, and removes the PostgreSQL directory. Safe on a partly
// started system.
func (s *System) Stop(ctx context.Context) {
	for _, p := range s.Workers {
		p.Stop(10 * time.Second)
	}
	if s.Intake != nil {
		s.Intake.Stop(10 * time.Second)
	}
	s.cancel()
	if s.DB != nil {
		s.DB.Close()
	}
	if s.NATS != nil {
		s.NATS.Stop(10 * time.Second)
	}
	if s.NATSCluster != nil {
		s.NATSCluster.Stop(10 * time.Second)
	}
	if s.Proxy != nil {
		s.Proxy.Close()
	}
	if s.PG != nil {
		_ = s.PG.Remove(ctx)
	}
	if s.Standby != nil {
		_ = s.Standby.Remove(ctx)
	}
	s.client.CloseIdleConnections()
}

// writeCredentials writes n "principal:argon2id-hash" lines (the format
// `etlctl credentials hash` prints) with random passwords and returns the
// principals and their Authorization headers.
func writeCredentials(path string, n int) ([]Principal, error) {
	var file strings.Builder
	var out []Principal
	for i := range n {
		name := "fi-http-" + strconv.Itoa(i)
		password := randomHex(16)
		line, err := auth.CredentialLine(name, []byte(password))
		if err != nil {
			return nil, fmt.Errorf("credential line: %w", err)
		}
		file.WriteString(line + "\n")
		out = append(out, Principal{Name: name,
			Authorization: "Basic " + base64.StdEncoding.EncodeToString([]byte(name+":"+password))})
	}
	if err := os.WriteFile(path, []byte(file.String()), 0o600); err != nil {
		return nil, fmt.Errorf("write credentials: %w", err)
	}
	return out, nil
}

// randomHex is n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ModuleRoot walks up from dir to the directory holding go.mod.
func ModuleRoot(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("no go.mod above " + dir)
		}
	}
}
