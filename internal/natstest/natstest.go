// Package natstest gives tests a real NATS server with JetStream and an
// isolated subject prefix.
//
// URL comes from TEST_NATS_URL when set, otherwise from the local server on
// its default port (LocalURL) when it answers with JetStream, otherwise from
// a testcontainers-go NATS container when a Docker engine answers; with none
// of them, tests FAIL with one line (they never pass by skipping). StartServer runs a private in-process
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
	"strings"
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
	urlMu   sync.Mutex // guards natsURL for the stream cleanup
	natsURL string
	urlErr  error
)

// LocalURL is where a developer machine and CI run NATS by default.
const LocalURL = "nats://127.0.0.1:4222"

// URL returns the shared test NATS server's URL, or fails the test with one
// line when there is none.
func URL(t testing.TB) string {
	t.Helper()
	urlOnce.Do(func() {
		u, err := resolveServer(os.Getenv("TEST_NATS_URL"), probeLocal, startContainer)
		urlMu.Lock()
		natsURL, urlErr = u, err
		urlMu.Unlock()
	})
	if urlErr != nil {
		t.Fatalf("natstest: no NATS for tests (set TEST_NATS_URL, start nats-server -js on 127.0.0.1:4222 or a Docker engine): %v", urlErr)
	}
	return natsURL
}

// resolveServer is URL's choice: env (TEST_NATS_URL) when set, else
// LocalURL when probe answers, else container(); an error names every
// source that was tried.
func resolveServer(env string, probe func() error, container func() (string, error)) (string, error) {
	if env != "" {
		return env, nil
	}
	localErr := probe()
	if localErr == nil {
		return LocalURL, nil
	}
	u, err := container()
	if err != nil {
		return "", fmt.Errorf("TEST_NATS_URL unset; local server: %v; %w", localErr, err)
	}
	return u, nil
}

// probeLocal connects to LocalURL and checks that JetStream answers.
func probeLocal() error {
	nc, err := nats.Connect(LocalURL, nats.Timeout(2*time.Second), nats.NoReconnect())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := nc.JetStream(nats.MaxWait(2 * time.Second))
	if err != nil {
		return err
	}
	if _, err := js.AccountInfo(); err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	return nil
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
// share a server never see each other's messages or streams. When the test
// ends, the streams of that prefix on the shared test server are deleted: a
// stream reserves its MaxBytes of JetStream storage (the request stream 1 GiB
// by default), so streams left behind by earlier runs would exhaust the
// server's storage and fail later runs with "insufficient storage resources".
func Prefix(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "t" + hex.EncodeToString(b)
	t.Cleanup(func() { deleteStreams(prefix) })
	return prefix
}

// deleteStreams deletes the streams of prefix ("<PREFIX>_*") on the shared
// test server, when a test has resolved it. Best effort: a test that used a
// private server, or a server already gone, leaves nothing to clean here.
func deleteStreams(prefix string) {
	urlMu.Lock()
	url := natsURL
	urlMu.Unlock()
	if url == "" {
		return
	}
	nc, err := nats.Connect(url, nats.Timeout(2*time.Second), nats.NoReconnect())
	if err != nil {
		return
	}
	defer nc.Close()
	js, err := nc.JetStream(nats.MaxWait(5 * time.Second))
	if err != nil {
		return
	}
	name := strings.ToUpper(prefix) + "_"
	var doomed []string
	for n := range js.StreamNames() {
		if strings.HasPrefix(n, name) {
			doomed = append(doomed, n)
		}
	}
	for _, n := range doomed {
		_ = js.DeleteStream(n)
	}
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
