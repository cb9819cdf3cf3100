package faultinject

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// pgBinDirGlob is where Debian and Ubuntu install the server binaries of
// each PostgreSQL major version; they are not always on PATH.
const pgBinDirGlob = "/usr/lib/postgresql/*/bin"

// ErrMissingTool is wrapped by the error of a lookup that found no binary.
// Its message names the fix in one line.
var ErrMissingTool = errors.New("missing tool")

// findPGTool finds a PostgreSQL server binary on PATH, else in the newest
// pgBinDirGlob directory that has it.
func findPGTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	dirs, _ := filepath.Glob(pgBinDirGlob)
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %s not found on PATH or in %s: install the PostgreSQL server (apt-get install postgresql; .ci/run does)", ErrMissingTool, name, pgBinDirGlob)
}

// pgMajor is the major version in a /usr/lib/postgresql/<major>/bin path, or 0.
func pgMajor(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// Postgres is a private PostgreSQL cluster in a directory of its own,
// listening on 127.0.0.1 on a port picked when it is created. It is driven
// by pg_ctl, so a stop can be -m immediate (the postmaster and every backend
// quit at once without a checkpoint; the next start runs crash recovery).
// When the test runs as root, initdb and the server run as the "postgres"
// OS user (they refuse root) in a directory that user owns.
//
// Methods are not safe for concurrent use; the fault injector is the only
// caller while the system runs.
type Postgres struct {
	initdb, pgCtl string
	root          string // owned by the server's OS user
	dataDir       string
	logFile       string
	port          int
	cred          *syscall.Credential
}

// NewPostgres creates a cluster under a new directory in os.TempDir() (not a
// test's TempDir: the postgres user must be able to reach it). It does not
// start it; call Start. Remove deletes the directory.
func NewPostgres(ctx context.Context) (*Postgres, error) {
	initdb, err := findPGTool("initdb")
	if err != nil {
		return nil, err
	}
	pgCtl, err := findPGTool("pg_ctl")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp("", "mightyetl-faultinject-pg-")
	if err != nil {
		return nil, fmt.Errorf("postgres directory: %w", err)
	}
	p := &Postgres{initdb: initdb, pgCtl: pgCtl, root: root, dataDir: filepath.Join(root, "data"),
		logFile: filepath.Join(root, "postgres.log"), port: port}
	if os.Geteuid() == 0 {
		if p.cred, err = osUserCredential("postgres"); err != nil {
			_ = os.RemoveAll(root)
			return nil, fmt.Errorf("running as root, initdb must run as the postgres OS user: %w (useradd postgres)", err)
		}
		if err := os.Chown(root, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
			_ = os.RemoveAll(root)
			return nil, fmt.Errorf("chown postgres directory: %w", err)
		}
	}
	// --no-sync: the cluster is thrown away; nothing here simulates a
	// machine crash, only process crashes, which never lose written pages.
	if out, err := p.command(ctx, p.initdb, "-D", p.dataDir, "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync").CombinedOutput(); err != nil {
		_ = os.RemoveAll(root)
		return nil, fmt.Errorf("initdb: %v: %s", err, lastLines(out, 5))
	}
	return p, nil
}

// osUserCredential is the uid and gid of an OS user.
func osUserCredential(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, err
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// command builds a command that runs as the cluster's OS user.
func (p *Postgres) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = p.root
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if p.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
	return cmd
}

// URL is the cluster's URL for database name.
func (p *Postgres) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p.port, database)
}

// Addr is the server's TCP address.
func (p *Postgres) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)) }

// Start starts the server and waits until it accepts connections (pg_ctl
// -w), crash recovery included.
func (p *Postgres) Start(ctx context.Context) error {
	opts := strings.Join([]string{
		"-p", strconv.Itoa(p.port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=" + p.root,
		"-c", "max_connections=200",
		// Process crashes never lose pages the OS holds; fsync only
		// protects against a machine crash, which this test does not cause.
		"-c", "fsync=off",
		"-c", "full_page_writes=off",
		"-c", "shared_buffers=64MB",
	}, " ")
	out, err := p.command(ctx, p.pgCtl, "-D", p.dataDir, "-l", p.logFile, "-w", "-t", "120", "-o", opts, "start").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl start: %v: %s", err, lastLines(out, 5))
	}
	return nil
}

// StopImmediate stops the server with -m immediate: no checkpoint, every
// connection dropped at once, crash recovery at the next start.
func (p *Postgres) StopImmediate(ctx context.Context) error { return p.stop(ctx, "immediate") }

// Stop stops the server with -m fast.
func (p *Postgres) Stop(ctx context.Context) error { return p.stop(ctx, "fast") }

func (p *Postgres) stop(ctx context.Context, mode string) error {
	out, err := p.command(ctx, p.pgCtl, "-D", p.dataDir, "-m", mode, "-w", "-t", "60", "stop").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl stop -m %s: %v: %s", mode, err, lastLines(out, 5))
	}
	return nil
}

// Running reports whether pg_ctl sees a running server.
func (p *Postgres) Running(ctx context.Context) bool {
	return p.command(ctx, p.pgCtl, "-D", p.dataDir, "status").Run() == nil
}

// Remove stops a running server (immediate) and deletes its directory.
func (p *Postgres) Remove(ctx context.Context) error {
	if p.Running(ctx) {
		if err := p.StopImmediate(ctx); err != nil {
			return err
		}
	}
	return os.RemoveAll(p.root)
}

// LogFile is the server log's path.
func (p *Postgres) LogFile() string { return p.logFile }

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// lastLines is the last n lines of out, for error messages.
func lastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// waitFor polls cond every period until it returns true, ctx ends or
// within passes.
func waitFor(ctx context.Context, within, period time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", within, what)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(period):
		}
	}
	return nil
}
