package faultinject

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// natsServerFallback is where the Debian/Ubuntu package installs the server.
const natsServerFallback = "/usr/sbin/nats-server"

// findNATSServer finds nats-server on PATH, else at natsServerFallback.
func findNATSServer() (string, error) {
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p, nil
	}
	if st, err := os.Stat(natsServerFallback); err == nil && st.Mode()&0o111 != 0 {
		return natsServerFallback, nil
	}
	return "", fmt.Errorf("%w: nats-server not found on PATH or at %s: install it (apt-get install nats-server; .ci/run does)", ErrMissingTool, natsServerFallback)
}

// NATSServer is a private nats-server with JetStream on a loopback port
// picked at creation, with a store directory of its own that survives
// restarts (streams, consumers and messages come back after Restart).
// Methods are not safe for concurrent use.
type NATSServer struct {
	bin      string
	port     int
	storeDir string
	logFile  string
	cmd      *exec.Cmd
	done     chan struct{}
}

// NewNATSServer prepares a server whose files live under dir; Start runs it.
func NewNATSServer(dir string) (*NATSServer, error) {
	bin, err := findNATSServer()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	store := filepath.Join(dir, "nats-store")
	if err := os.MkdirAll(store, 0o700); err != nil {
		return nil, fmt.Errorf("nats store directory: %w", err)
	}
	return &NATSServer{bin: bin, port: port, storeDir: store, logFile: filepath.Join(dir, "nats-server.log")}, nil
}

// URL is the client URL.
func (n *NATSServer) URL() string { return "nats://" + n.addr() }

func (n *NATSServer) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)) }

// Start runs the server and waits until its port accepts connections.
func (n *NATSServer) Start(ctx context.Context) error {
	logf, err := os.OpenFile(n.logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(n.bin, "-a", "127.0.0.1", "-p", strconv.Itoa(n.port), "-js", "-sd", n.storeDir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start nats-server: %w", err)
	}
	n.cmd, n.done = cmd, make(chan struct{})
	go func(done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(n.done)
	return waitFor(ctx, 30*time.Second, 20*time.Millisecond, "nats-server to listen", func() bool {
		select {
		case <-n.done:
			return false
		default:
		}
		c, err := net.DialTimeout("tcp", n.addr(), 200*time.Millisecond)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
}

// Stop stops the server with SIGTERM, which flushes the JetStream store
// (a SIGKILL may drop the last acknowledged messages of a file store
// before nats-server 2.10's sync_interval setting; that would be a test
// artefact, not a product fault), and SIGKILL after grace.
func (n *NATSServer) Stop(grace time.Duration) {
	stopNATSProcess(n.cmd, n.done, grace)
	n.cmd = nil
}

// stopNATSProcess stops a nats-server process (nil: not running) with
// SIGTERM, which flushes its JetStream store, and SIGKILL after grace, and
// waits for done (closed when the process has been reaped).
func stopNATSProcess(cmd *exec.Cmd, done <-chan struct{}, grace time.Duration) {
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
}
