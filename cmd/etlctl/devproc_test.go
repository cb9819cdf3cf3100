package main_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

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
// on standard output.
type devProcess struct {
	*binarytest.Process
}

// startDev runs bin's `dev` against the database at dbURL, on loopback ports
// picked by the system, without any mightyETL, database, NATS or
// OpenTelemetry setting from the test's environment, plus extra; standard
// error is discarded. The process is killed when the test ends.
func startDev(t *testing.T, bin, dbURL string, extra ...string) *devProcess {
	t.Helper()
	env := append([]string{"DATABASE_URL=" + dbURL, "MIGHTYETL_HTTP_ADDR=127.0.0.1:0", "MIGHTYETL_METRICS_ADDR=127.0.0.1:0"}, extra...)
	return &devProcess{binarytest.Spawn(t, binarytest.Options{Path: bin, Args: []string{"dev"}, Stderr: io.Discard,
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
