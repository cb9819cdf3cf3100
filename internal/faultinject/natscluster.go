package faultinject

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mightyetl/mightyetl/internal/events"
)

// natsClusterName is the cluster name every node of a NATSCluster carries
// (JetStream clustering needs one, and a server_name per node).
const natsClusterName = "faultinject"

// NATSCluster is a private JetStream cluster of nats-server processes on
// loopback ports: each node has its own client port, cluster (route) port,
// server name and store directory, and routes to every other node. A node
// can be killed (SIGKILL) and started again on the same store; it then
// catches up from the others through JetStream's RAFT groups. Methods are
// not safe for concurrent use.
type NATSCluster struct {
	Nodes []*NATSNode
}

// NATSNode is one server of a NATSCluster.
type NATSNode struct {
	Name        string // server_name, "n1".."nN"
	bin         string
	port        int // client port
	clusterPort int
	routes      []string // the other nodes' route URLs
	storeDir    string
	logFile     string
	cmd         *exec.Cmd
	done        chan struct{}
}

// NewNATSCluster prepares n nodes whose files live under dir; Start runs
// them.
func NewNATSCluster(dir string, n int) (*NATSCluster, error) {
	bin, err := findNATSServer()
	if err != nil {
		return nil, err
	}
	c := &NATSCluster{}
	for i := range n {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		cport, err := freePort()
		if err != nil {
			return nil, err
		}
		name := "n" + strconv.Itoa(i+1)
		store := filepath.Join(dir, "nats-"+name)
		if err := os.MkdirAll(store, 0o700); err != nil {
			return nil, fmt.Errorf("nats store directory: %w", err)
		}
		c.Nodes = append(c.Nodes, &NATSNode{Name: name, bin: bin, port: port, clusterPort: cport,
			storeDir: store, logFile: filepath.Join(dir, "nats-"+name+".log")})
	}
	for _, a := range c.Nodes {
		for _, b := range c.Nodes {
			if a != b {
				a.routes = append(a.routes, "nats://"+b.clusterAddr())
			}
		}
	}
	return c, nil
}

// URL is the comma-separated client URLs of every node (NATS_URL): a
// client connects to one and fails over to another.
func (c *NATSCluster) URL() string {
	urls := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		urls[i] = n.URL()
	}
	return strings.Join(urls, ",")
}

// Start starts every node and waits until JetStream answers (the meta
// group has a leader).
func (c *NATSCluster) Start(ctx context.Context) error {
	for _, n := range c.Nodes {
		if err := n.Start(ctx); err != nil {
			return err
		}
	}
	return c.WaitJetStream(ctx, time.Minute)
}

// Stop stops every running node (Stop).
func (c *NATSCluster) Stop(grace time.Duration) {
	for _, n := range c.Nodes {
		n.Stop(grace)
	}
}

// WaitJetStream waits until the cluster's JetStream answers an account
// info request (it needs a meta leader, so a quorum of nodes).
func (c *NATSCluster) WaitJetStream(ctx context.Context, within time.Duration) error {
	nc, err := nats.Connect(c.URL(), nats.Name("faultinject-cluster"), nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		return fmt.Errorf("connect to the NATS cluster: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	return waitFor(ctx, within, 100*time.Millisecond, "JetStream in the NATS cluster (meta leader)", func() bool {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := js.AccountInfo(actx)
		return err == nil
	})
}

// StreamsCurrent reports whether each stream and each consumer named in
// consumers ("stream/durable") has a leader and every other node as a
// current, online replica with no lag: a restarted node has caught up.
// It reads stream and consumer info from the cluster (js).
func StreamsCurrent(ctx context.Context, js jetstream.JetStream, nodes int, streams []string, consumers []string) (bool, error) {
	current := func(ci *jetstream.ClusterInfo) bool {
		if ci == nil || ci.Leader == "" || len(ci.Replicas) != nodes-1 {
			return false
		}
		for _, r := range ci.Replicas {
			if !r.Current || r.Offline || r.Lag != 0 {
				return false
			}
		}
		return true
	}
	for _, name := range streams {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return false, err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return false, err
		}
		if !current(info.Cluster) {
			return false, nil
		}
	}
	for _, sc := range consumers {
		stream, durable, _ := strings.Cut(sc, "/")
		cons, err := js.Consumer(ctx, stream, durable)
		if err != nil {
			return false, err
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return false, err
		}
		if !current(info.Cluster) {
			return false, nil
		}
	}
	return true, nil
}

// StreamReplicas returns the configured replica count of stream.
func StreamReplicas(ctx context.Context, js jetstream.JetStream, stream string) (int, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	return st.CachedInfo().Config.Replicas, nil
}

// URL is the node's client URL.
func (n *NATSNode) URL() string { return "nats://" + n.addr() }

func (n *NATSNode) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)) }

func (n *NATSNode) clusterAddr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.clusterPort))
}

// Running reports whether the node's process is up.
func (n *NATSNode) Running() bool {
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// Start runs the node on its store directory and waits until its client
// port accepts connections.
func (n *NATSNode) Start(ctx context.Context) error {
	if n.Running() {
		return fmt.Errorf("nats node %s is already running", n.Name)
	}
	logf, err := os.OpenFile(n.logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(n.bin, "-a", "127.0.0.1", "-p", strconv.Itoa(n.port),
		"--server_name", n.Name, "-js", "-sd", n.storeDir,
		"--cluster_name", natsClusterName, "--cluster", "nats://"+n.clusterAddr(),
		"--routes", strings.Join(n.routes, ","))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start nats-server %s: %w", n.Name, err)
	}
	n.cmd, n.done = cmd, make(chan struct{})
	go func(done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(n.done)
	return waitFor(ctx, 30*time.Second, 20*time.Millisecond, "nats-server "+n.Name+" to listen", func() bool {
		if !n.Running() {
			return false
		}
		c, err := net.DialTimeout("tcp", n.addr(), 200*time.Millisecond)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
}

// Kill kills the node with SIGKILL (no flush, no goodbye to the routes or
// the clients) and waits for the process to be gone.
func (n *NATSNode) Kill() error {
	if !n.Running() {
		return errors.New("nats node " + n.Name + " is not running")
	}
	_ = n.cmd.Process.Kill()
	<-n.done
	n.cmd = nil
	return nil
}

// Stop stops the node with SIGTERM and SIGKILL after grace; a node that
// is not running is left alone.
func (n *NATSNode) Stop(grace time.Duration) {
	stopNATSProcess(n.cmd, n.done, grace)
	n.cmd = nil
}

// NATSURL is the NATS_URL the binaries get: the single server's URL, or
// every cluster node's, comma-separated.
func (s *System) NATSURL() string {
	if s.NATSCluster != nil {
		return s.NATSCluster.URL()
	}
	return s.NATS.URL()
}

// natsEnv is the NATS part of a process's environment: NATS_URL, and with a
// cluster the streams' replica count (one per node).
func (s *System) natsEnv() []string {
	env := []string{"NATS_URL=" + s.NATSURL()}
	if s.NATSCluster != nil {
		env = append(env, "MIGHTYETL_NATS_STREAM_REPLICAS="+strconv.Itoa(len(s.NATSCluster.Nodes)))
	}
	return env
}

// startNATS starts the single NATS server, or with Config.NATSNodes > 1
// the cluster.
func (s *System) startNATS(ctx context.Context) error {
	var err error
	if s.cfg.NATSNodes > 1 {
		if s.NATSCluster, err = NewNATSCluster(s.cfg.RunDir, s.cfg.NATSNodes); err != nil {
			return err
		}
		return s.NATSCluster.Start(ctx)
	}
	if s.NATS, err = NewNATSServer(s.cfg.RunDir); err != nil {
		return err
	}
	return s.NATS.Start(ctx)
}

// clusterStreams are the names of the request and lifecycle streams and
// "stream/durable" of the request consumer of prefix.
func clusterStreams(prefix string) (streams, consumers []string, err error) {
	subj, err := events.NewSubjects(prefix)
	if err != nil {
		return nil, nil, err
	}
	return []string{subj.RequestsStream(), subj.LifecycleStream()},
		[]string{subj.RequestsStream() + "/" + events.DefaultRequestDurable}, nil
}
