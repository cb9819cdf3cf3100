// Package testio holds small I/O helpers shared by tests: an output buffer
// safe to write from one goroutine while the test reads it, a local TCP
// port nothing listens on, and the goroutines a leak check may ignore
// because they close asynchronously.
package testio

import (
	"bytes"
	"net"
	"strconv"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// SyncBuffer is a goroutine-safe bytes.Buffer for a log sink or a child
// process's output that the test reads while it is written.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// ClosedPort returns a local TCP port (as a decimal string) nothing listens
// on: one the system picked for a listener that is closed again.
func ClosedPort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return port
}

// AsyncCloseLeaks are the goroutines goleak.VerifyTestMain may find still
// winding down after a package's tests: pgx pools of databases dropped at
// cleanup, and the keep-alive connections of an HTTP client, close
// asynchronously.
func AsyncCloseLeaks() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
	}
}
