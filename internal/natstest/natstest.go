// Package natstest gives tests a real NATS server with JetStream and an
// isolated subject prefix.
//
// URL comes from TEST_NATS_URL when set, otherwise from a testcontainers-go
// NATS container when a Docker engine answers; with neither, tests skip
// locally and FAIL when CI=true. StartServer runs a private in-process
// nats-server on a free port, for tests that must stop and restart NATS.
package natstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

var (
	urlOnce sync.Once
	natsURL string
	urlErr  error
)

// URL returns the shared test NATS server's URL, or ends the test (skip
// locally, fail under CI=true) when there is none.
func URL(t testing.TB) string {
	t.Helper()
	urlOnce.Do(func() {
		if u := os.Getenv("TEST_NATS_URL"); u != "" {
			natsURL = u
			return
		}
		natsURL, urlErr = startContainer()
	})
	if urlErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("natstest: no NATS for tests (set TEST_NATS_URL or run a Docker engine): %v", urlErr)
		}
		t.Skipf("natstest: no NATS for tests (set TEST_NATS_URL or run a Docker engine): %v", urlErr)
	}
	return natsURL
}

func startContainer() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := testcontainers.NewDockerProvider(); err != nil {
		return "", fmt.Errorf("no docker engine: %w", err)
	}
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:        "nats:2",
			Cmd:          []string{"-js"},
			ExposedPorts: []string{"4222/tcp"},
			WaitingFor:   wait.ForLog("Server is ready"),
		},
		Started: true,
	})
	if err != nil {
		return "", fmt.Errorf("start nats container: %w", err)
	}
	ep, err := c.PortEndpoint(ctx, "4222/tcp", "nats")
	if err != nil {
		return "", fmt.Errorf("nats endpoint: %w", err)
	}
	return ep, nil
}

// Prefix returns a fresh subject prefix ("t" + 12 hex digits) so tests that
// share a server never see each other's messages or streams.
func Prefix(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "t" + hex.EncodeToString(b)
}

// Connect opens a connection to url that is closed when the test ends.
func Connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Server is a private in-process NATS server with JetStream on a fixed port,
// which a test can stop and start again at the same address.
type Server struct {
	t     testing.TB
	port  int
	dir   string
	mu    sync.Mutex
	inner *natsserver.Server
}

// StartServer starts a private server on a free loopback port; it is shut
// down when the test ends.
func StartServer(t testing.TB) *Server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("natstest: free port: %v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	s := &Server{t: t, port: port, dir: t.TempDir()}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// URL is the server's client URL; it stays the same across restarts.
func (s *Server) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

// Start starts the server if it is stopped and waits until it accepts clients.
func (s *Server) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inner != nil {
		return
	}
	srv, err := natsserver.NewServer(&natsserver.Options{
		Host:      "127.0.0.1",
		Port:      s.port,
		JetStream: true,
		StoreDir:  s.dir,
		NoLog:     true,
		NoSigs:    true,
	})
	if err != nil {
		s.t.Fatalf("natstest: new server: %v", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		s.t.Fatalf("natstest: server not ready")
	}
	s.inner = srv
}

// Stop shuts the server down and waits until it has stopped; safe to call twice.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inner == nil {
		return
	}
	s.inner.Shutdown()
	s.inner.WaitForShutdown()
	s.inner = nil
}
