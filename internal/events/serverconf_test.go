package events

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/testwait"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

type replyingHandler struct{}

func (replyingHandler) HandleRequest(context.Context, string, string, []byte) ([]byte, string, error) {
	return []byte("ok"), "", nil
}

// TestSampleServerConfigPermissions runs deploy/nats/server.conf in process
// and checks that each role can do its job and a producer cannot speak for
// another principal.
func TestSampleServerConfigPermissions(t *testing.T) {
	pw := map[string]string{
		"MIGHTYETL_NATS_INTAKE_PASSWORD": "intake-pw", "MIGHTYETL_NATS_WORKER_PASSWORD": "worker-pw",
		"MIGHTYETL_NATS_ALICE_PASSWORD": "alice-pw", "MIGHTYETL_NATS_READER_PASSWORD": "reader-pw",
	}
	for k, v := range pw {
		t.Setenv(k, v)
	}
	o, err := natsserver.ProcessConfigFile("../../deploy/nats/server.conf")
	if err != nil {
		t.Fatalf("sample config: %v", err)
	}
	o.StoreDir, o.Host, o.Port, o.NoSigs, o.NoLog = t.TempDir(), "127.0.0.1", -1, true, true
	srv, err := natsserver.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	connect := func(user, password string) *nats.Conn {
		nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(user, password))
		if err != nil {
			t.Fatalf("connect as %s: %v", user, err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	ctx := t.Context()

	// intake: lifecycle stream and publish.
	intake := connect("intake", "intake-pw")
	js, _ := jetstream.New(intake)
	if _, err := EnsureLifecycleStream(ctx, js, DefaultPrefix); err != nil {
		t.Fatalf("intake ensures lifecycle stream: %v", err)
	}
	s, _ := NewSubjects(DefaultPrefix)
	m, _ := LifecycleMsg(s, "", Lifecycle{OutboxID: 1, Status: "SUCCEEDED"})
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatalf("intake publishes lifecycle event: %v", err)
	}
	// intake: request consumer.
	c, err := NewRequestConsumer(intake, DefaultPrefix, replyingHandler{}, nil, nil, RequestConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })

	// producer: its own subject works and gets the reply.
	alice := connect("producer-alice", "alice-pw")
	ajs, _ := jetstream.New(alice, jetstream.WithDefaultTimeout(2*time.Second))
	inbox := nats.NewInbox()
	sub, err := alice.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	req := func(subject string) error {
		msg := nats.NewMsg(subject)
		msg.Header.Set(ReplyToHeader, inbox)
		msg.Header.Set(jetstream.MsgIDHeader, "key-0000000000000001")
		_, err := ajs.PublishMsg(ctx, msg)
		return err
	}
	testwait.For(t, 10*time.Second, "request stream accepts alice", func() bool { return req("mightyetl.requests.producer-alice") == nil })
	if r, err := sub.NextMsg(10 * time.Second); err != nil || string(r.Data) != "ok" {
		t.Fatalf("alice's reply = %v, %v", r, err)
	}
	// producer: another principal's subject is refused.
	if err := req("mightyetl.requests.producer-bob"); err == nil {
		t.Fatal("alice published as bob")
	}

	// worker: may subscribe to advisories.
	worker := connect("worker", "worker-pw")
	if _, err := SubscribeWakeups(worker, DefaultPrefix, nil, func() {}); err != nil {
		t.Fatal(err)
	}
	if _, err := SubscribeRevocations(worker, DefaultPrefix, nil, func(uuid.UUID) {}); err != nil {
		t.Fatal(err)
	}
	if err := worker.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := worker.LastError(); err != nil {
		t.Fatalf("worker subscriptions: %v", err)
	}
}
