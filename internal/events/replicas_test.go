package events

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mightyetl/mightyetl/internal/natstest"
)

// errCodeReplicasNotSupported is JetStream's "replicas > 1 not supported in
// non-clustered mode" (nats.go names no constant for it).
const errCodeReplicasNotSupported jetstream.ErrorCode = 10074

// WithReplicas sets the count (below 1 means 1), and a standalone server
// refuses a stream of more than one replica with JetStream's error 10074
// (docs/operations/nats.md, "On a single server keep 1"); one replica is
// the default and works there. Replicas in a cluster:
// internal/faultinject's TestNATSClusterNodeLoss.
func TestStreamReplicasOnAStandaloneServer(t *testing.T) {
	t.Parallel()
	s, err := NewSubjects(natstest.Prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	for n, want := range map[int]int{-1: 1, 0: 1, 1: 1, 3: 3, 5: 5} {
		if got := WithReplicas(LifecycleStreamConfig(s), n).Replicas; got != want {
			t.Errorf("WithReplicas(%d) = %d, want %d", n, got, want)
		}
	}
	srv := natstest.StartServer(t)
	nc := natstest.Connect(t, srv.URL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	_, err = EnsureLifecycleStreamReplicas(t.Context(), js, s.Prefix(), 3)
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != errCodeReplicasNotSupported {
		t.Fatalf("R3 on a standalone server: %v, want JetStream error %d", err, errCodeReplicasNotSupported)
	}
	st, err := EnsureLifecycleStreamReplicas(t.Context(), js, s.Prefix(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if r := st.CachedInfo().Config.Replicas; r != 1 {
		t.Fatalf("R1 stream has %d replicas", r)
	}
}
