package events

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/testwait"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

type replyingHandler struct{}

func (replyingHandler) HandleRequest(context.Context, Request) ([]byte, string, error) {
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
	connect := func(user, password string, opts ...nats.Option) *nats.Conn {
		nc, err := nats.Connect(srv.ClientURL(), append(opts, nats.UserInfo(user, password))...)
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
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		t.Fatalf("intake publishes lifecycle event: %v", err)
	}
	// The relay reads the stored original of a duplicate-acknowledged event.
	if st, err := js.Stream(ctx, s.LifecycleStream()); err != nil {
		t.Fatalf("intake looks up the lifecycle stream: %v", err)
	} else if _, err := st.GetMsg(ctx, ack.Sequence); err != nil {
		t.Fatalf("intake reads a stored lifecycle event: %v", err)
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

	// producer: its own subject works and gets the reply in its own inbox
	// (the producer convention: inbox prefix "_INBOX.<principal>",
	// key in IdempotencyKeyHeader).
	alice := connect("producer-alice", "alice-pw", nats.CustomInboxPrefix(ReplyInboxPrefix("producer-alice")))
	ajs, _ := jetstream.New(alice, jetstream.WithDefaultTimeout(2*time.Second))
	inbox := alice.NewInbox()
	sub, err := alice.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	req := func(subject string) error {
		msg := nats.NewMsg(subject)
		msg.Header.Set(ReplyToHeader, inbox)
		msg.Header.Set(IdempotencyKeyHeader, "key-0000000000000001")
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
	// producer: it cannot listen to other inboxes (another producer's
	// replies, the intake's JetStream API responses).
	for _, foreign := range []string{"_INBOX.producer-bob.x", "_INBOX.>"} {
		errs := make(chan error, 1)
		probe := connect("producer-alice", "alice-pw", nats.CustomInboxPrefix(ReplyInboxPrefix("producer-alice")),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				select {
				case errs <- err:
				default:
				}
			}))
		if _, err := probe.SubscribeSync(foreign); err != nil {
			t.Fatal(err)
		}
		if err := probe.Flush(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errs:
			if !errors.Is(err, nats.ErrPermissionViolation) {
				t.Fatalf("alice subscribes to %s: %v", foreign, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("alice subscribed to %s", foreign)
		}
	}
	// intake: it cannot publish into an inbox no producer of the sample owns.
	intakeErrs := make(chan error, 1)
	intakeProbe := connect("intake", "intake-pw", nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case intakeErrs <- err:
		default:
		}
	}))
	if err := intakeProbe.Publish("_INBOX.someone-else.x", []byte("spoof")); err != nil {
		t.Fatal(err)
	}
	if err := intakeProbe.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-intakeErrs:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("intake publishes to a foreign inbox: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("intake published to a foreign inbox")
	}

	// lifecycle-reader: reads the lifecycle stream through a consumer of its
	// own, with replies under its own inbox, and cannot listen to a
	// producer's replies.
	reader := connect("lifecycle-reader", "reader-pw", nats.CustomInboxPrefix("_INBOX.lifecycle-reader"))
	rjs, err := jetstream.New(reader)
	if err != nil {
		t.Fatal(err)
	}
	rcons, err := rjs.CreateOrUpdateConsumer(ctx, "MIGHTYETL_LIFECYCLE", jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatalf("reader creates a lifecycle consumer: %v", err)
	}
	if _, err := rcons.Fetch(1, jetstream.FetchMaxWait(time.Second)); err != nil {
		t.Fatalf("reader fetches lifecycle events: %v", err)
	}
	readerErrs := make(chan error, 1)
	readerProbe := connect("lifecycle-reader", "reader-pw", nats.CustomInboxPrefix("_INBOX.lifecycle-reader"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case readerErrs <- err:
			default:
			}
		}))
	if _, err := readerProbe.SubscribeSync("_INBOX.producer-alice.x"); err != nil {
		t.Fatal(err)
	}
	if err := readerProbe.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-readerErrs:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("reader subscribes to a producer's inbox: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the lifecycle reader subscribed to a producer's inbox")
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
