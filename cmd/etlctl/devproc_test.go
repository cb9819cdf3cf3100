package main_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/client"
	"github.com/mightyetl/mightyetl/internal/binarytest"
)

// TestMain removes the etlctl binary built for the tests once they ran.
func TestMain(m *testing.M) { binarytest.Main(m) }

// buildEtlctl returns the etlctl binary, built once per test binary.
func buildEtlctl(t *testing.T) string {
	t.Helper()
	return binarytest.Binary(t, "etlctl")
}

// devProcess is a running `etlctl dev`; its kept output is what it printed
// on standard output (and standard error too when spawnDev kept it).
type devProcess struct {
	*binarytest.Process
}

// startDev runs bin's `dev` against the database at dbURL, on loopback ports
// picked by the system, with its identity in a directory of the test's own,
// without any mightyETL, database, NATS or OpenTelemetry setting from the
// test's environment, plus extra (a later setting of a name wins); standard
// error is discarded. The process is killed when the test ends.
func startDev(t *testing.T, bin, dbURL string, extra ...string) *devProcess {
	t.Helper()
	return spawnDev(t, bin, nil, io.Discard, append(devEnv(t, dbURL), extra...)...)
}

// devEnv is startDev's environment before extra.
func devEnv(t *testing.T, dbURL string) []string {
	return []string{"DATABASE_URL=" + dbURL, "MIGHTYETL_HTTP_ADDR=127.0.0.1:0", "MIGHTYETL_METRICS_ADDR=127.0.0.1:0",
		"MIGHTYETL_DEV_STATE_DIR=" + t.TempDir()}
}

// spawnDev runs bin's `dev` with args and exactly the settings env (and the
// test environment's other variables). stderr nil keeps standard error in
// the process's output, interleaved with standard output.
func spawnDev(t *testing.T, bin string, args []string, stderr io.Writer, env ...string) *devProcess {
	t.Helper()
	return &devProcess{binarytest.Spawn(t, binarytest.Options{Path: bin, Args: append([]string{"dev"}, args...), Stderr: stderr,
		Env: binarytest.Env(binarytest.Isolated, env...)})}
}

// readUntil passes each printed line, from the first, to seen until seen
// returns true. It fails the test with exited when dev ends first, and with
// timeout when 90s pass first.
func (d *devProcess) readUntil(t *testing.T, seen func(line string) bool, exited, timeout string) {
	t.Helper()
	if err := d.WaitLine(context.Background(), 90*time.Second, seen); err != nil {
		if errors.Is(err, binarytest.ErrExited) {
			t.Fatalf("%s: %v", exited, err)
		}
		t.Fatalf("%s: %v", timeout, err)
	}
}

// apiSettings reads the printed output up to the CLI's export line and
// returns its settings: the API URL, the user and the password.
func (d *devProcess) apiSettings(t *testing.T) (url, user, password string) {
	t.Helper()
	d.readUntil(t, func(l string) bool {
		rest, ok := strings.CutPrefix(l, "export ")
		if !ok || !strings.HasPrefix(rest, "MIGHTYETL_API_URL=") {
			return false
		}
		for _, kv := range strings.Fields(rest) {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "MIGHTYETL_API_URL":
				url = v
			case "MIGHTYETL_API_USER":
				user = v
			case "MIGHTYETL_API_PASSWORD":
				password = v
			}
		}
		return true
	}, "dev exited before printing the export line", "no export line within 90s")
	if url == "" || user == "" || password == "" {
		t.Fatalf("export line without URL, user or password")
	}
	return url, user, password
}

// apiClient is a client of the API with the settings dev printed.
func (d *devProcess) apiClient(t *testing.T) (c *client.Client, password string) {
	t.Helper()
	url, user, password := d.apiSettings(t)
	c, err := client.New(url, client.WithBasicAuth(user, password))
	if err != nil {
		t.Fatal(err)
	}
	return c, password
}

// syncBuffer is a bytes.Buffer safe for a process's writes and the
// test's reads at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
