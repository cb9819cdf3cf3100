// Package pgbouncertest runs a private PgBouncer in transaction pooling mode
// in front of a real PostgreSQL server, for tests and benchmarks of the
// MIGHTYETL_DATABASE_POOLER=transaction path.
//
// The pgbouncer binary is Debian's (/usr/sbin/pgbouncer, 1.18; .ci/run
// installs it), else the first pgbouncer on PATH. Without one, Start fails the
// test with one line: a pooler test never passes by skipping.
//
// The configuration is the one docs/operations/pgbouncer.md recommends, on a
// free loopback port: pool_mode = transaction, one wildcard database entry
// (every database name the client asks for is forwarded to the upstream
// server under the same name and user), auth_type = trust with an auth_file
// holding the upstream URL's user and password (PgBouncer logs in to the
// server with it), no ignore_startup_parameters (a client that sends a
// session setting as a startup parameter is refused, as in production), and
// an admin console (database "pgbouncer") for the upstream URL's user.
// PgBouncer refuses to run as root; as root it is started with -u nobody.
package pgbouncertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// DefaultPath is where Debian's pgbouncer package installs the binary.
const DefaultPath = "/usr/sbin/pgbouncer"

// Options configures a PgBouncer. Zero values take the defaults noted.
type Options struct {
	// Upstream is a URL of any database on the PostgreSQL server to pool;
	// only its host, port, user and password are used. Start's default is
	// pgtest.ServerURL (TEST_DATABASE_URL's server).
	Upstream string
	// PoolSize is default_pool_size: the most server connections per
	// (database, user) pair; zero means 5.
	PoolSize int
	// MaxClientConn is max_client_conn; zero means 1000.
	MaxClientConn int
	// Binary is the pgbouncer executable; empty means DefaultPath, else the
	// first pgbouncer on PATH.
	Binary string
	// Dir holds the configuration and auth file; empty means a new temporary
	// directory removed by Stop.
	Dir string
}

// Bouncer is one running PgBouncer process. Its methods are safe for
// concurrent use.
type Bouncer struct {
	addr     string // host:port it listens on
	upstream *url.URL
	cmd      *exec.Cmd
	dir      string
	ownDir   bool
	done     chan struct{}
	waitErr  error
	out      *lockedBuffer
	stopOnce sync.Once
}

// Start runs a PgBouncer for the test and stops it when the test ends. It
// fails the test with one line when pgbouncer is not installed or does not
// start.
func Start(t testing.TB, opts Options) *Bouncer {
	t.Helper()
	if opts.Upstream == "" {
		opts.Upstream = pgtest.ServerURL(t)
	}
	b, err := Launch(context.Background(), opts)
	if err != nil {
		t.Fatalf("pgbouncertest: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Stop(); err != nil {
			t.Logf("pgbouncertest: stop: %v", err)
		}
	})
	return b
}

// Launch is Start without a test: the caller stops the Bouncer. It returns
// once PgBouncer accepts connections, or an error naming the cause and the
// tail of PgBouncer's log.
func Launch(ctx context.Context, opts Options) (*Bouncer, error) {
	bin, err := findBinary(opts.Binary)
	if err != nil {
		return nil, err
	}
	up, err := url.Parse(opts.Upstream)
	if err != nil || up.Host == "" {
		return nil, fmt.Errorf("upstream %q is not a postgres:// URL with a host", redact(opts.Upstream))
	}
	if opts.PoolSize <= 0 {
		opts.PoolSize = 5
	}
	if opts.MaxClientConn <= 0 {
		opts.MaxClientConn = 1000
	}
	b := &Bouncer{upstream: up, done: make(chan struct{}), out: &lockedBuffer{}}
	b.dir = opts.Dir
	if b.dir == "" {
		if b.dir, err = os.MkdirTemp("", "pgbouncertest-"); err != nil {
			return nil, err
		}
		b.ownDir = true
	}
	// A free port can be taken between choosing and binding it; try again.
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			b.cleanDir()
			return nil, err
		}
		b.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		err = b.run(ctx, bin, port, opts)
		if err == nil {
			return b, nil
		}
		if attempt == 2 || !strings.Contains(b.out.String(), "Address already in use") {
			b.cleanDir()
			return nil, err
		}
		b.done, b.out, b.waitErr = make(chan struct{}), &lockedBuffer{}, nil
	}
}

func findBinary(path string) (string, error) {
	if path != "" {
		return path, nil
	}
	if _, err := os.Stat(DefaultPath); err == nil {
		return DefaultPath, nil
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	return "", errors.New("pgbouncer is not installed (apt-get install pgbouncer; .ci/run installs it)")
}

// config is the pgbouncer.ini of docs/operations/pgbouncer.md with the test's
// port and sizes.
func (b *Bouncer) config(port int, opts Options) string {
	host, upPort := b.upstream.Hostname(), b.upstream.Port()
	if upPort == "" {
		upPort = "5432"
	}
	usr := b.user()
	return fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
admin_users = %s
pool_mode = transaction
default_pool_size = %d
max_client_conn = %d
server_login_retry = 1
log_connections = 0
log_disconnections = 0
`, host, upPort, port, filepath.Join(b.dir, "userlist.txt"), usr, opts.PoolSize, opts.MaxClientConn)
}

func (b *Bouncer) user() string {
	if u := b.upstream.User.Username(); u != "" {
		return u
	}
	return "postgres"
}

func (b *Bouncer) run(ctx context.Context, bin string, port int, opts Options) error {
	quote := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
	pw, _ := b.upstream.User.Password()
	if err := os.WriteFile(filepath.Join(b.dir, "userlist.txt"), []byte(quote(b.user())+" "+quote(pw)+"\n"), 0o600); err != nil {
		return err
	}
	ini := filepath.Join(b.dir, "pgbouncer.ini")
	if err := os.WriteFile(ini, []byte(b.config(port, opts)), 0o600); err != nil {
		return err
	}
	args := []string{ini}
	if os.Geteuid() == 0 {
		// PgBouncer exits with "PgBouncer should not run as root"; -u drops
		// to the user after the files are read.
		if _, err := user.Lookup("nobody"); err != nil {
			return fmt.Errorf("running as root and there is no user nobody for pgbouncer -u: %w", err)
		}
		args = []string{"-u", "nobody", ini}
	}
	b.cmd = exec.Command(bin, args...)
	b.cmd.Stdout, b.cmd.Stderr = b.out, b.out
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := b.cmd.Start(); err != nil {
		return fmt.Errorf("start pgbouncer: %w", err)
	}
	go func() {
		b.waitErr = b.cmd.Wait()
		close(b.done)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-b.done:
			return fmt.Errorf("pgbouncer exited at start (%v): %s", b.waitErr, b.out.Tail(5))
		case <-ctx.Done():
			_ = b.Stop()
			return ctx.Err()
		default:
		}
		if c, err := net.DialTimeout("tcp", b.addr, time.Second); err == nil {
			_ = c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			_ = b.Stop()
			return fmt.Errorf("pgbouncer did not listen on %s within 30s: %s", b.addr, b.out.Tail(5))
		}
		select {
		case <-b.done:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Addr is host:port where PgBouncer listens.
func (b *Bouncer) Addr() string { return b.addr }

// URL returns databaseURL (a URL of a database on the upstream server) with
// its host and port replaced by PgBouncer's: the same database and user
// through the pooler. Query parameters are kept.
func (b *Bouncer) URL(databaseURL string) string {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return databaseURL
	}
	u.Host = b.addr
	return u.String()
}

// AdminURL is the URL of PgBouncer's admin console (database "pgbouncer"),
// which speaks only the simple query protocol: use it with
// default_query_exec_mode=simple_protocol.
func (b *Bouncer) AdminURL() string {
	u := *b.upstream
	u.Host = b.addr
	u.Path = "/pgbouncer"
	q := u.Query()
	q.Set("default_query_exec_mode", "simple_protocol")
	u.RawQuery = q.Encode()
	return u.String()
}

// Log returns what PgBouncer has written to its log so far.
func (b *Bouncer) Log() string { return b.out.String() }

// Stop shuts PgBouncer down at once (SIGINT: immediate shutdown, client
// connections closed) and waits for it to exit, then removes its temporary
// directory. Safe to call twice.
func (b *Bouncer) Stop() error {
	var err error
	b.stopOnce.Do(func() {
		if b.cmd != nil && b.cmd.Process != nil {
			_ = b.cmd.Process.Signal(syscall.SIGINT)
			select {
			case <-b.done:
			case <-time.After(10 * time.Second):
				_ = b.cmd.Process.Kill()
				<-b.done
				err = errors.New("pgbouncer ignored SIGINT for 10s; killed")
			}
		}
		b.cleanDir()
	})
	return err
}

func (b *Bouncer) cleanDir() {
	if b.ownDir {
		_ = os.RemoveAll(b.dir)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// redact drops a URL's password for an error message.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// lockedBuffer collects PgBouncer's output.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Tail is the last n lines of the output.
func (l *lockedBuffer) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(l.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
