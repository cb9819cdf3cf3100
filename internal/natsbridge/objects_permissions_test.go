package natsbridge

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/intake"
)

// TestSampleServerConfigObjectStore runs deploy/nats/server.conf in process
// and checks the Object Store part of it: producer-alice creates her
// bucket (events.Subjects.ObjectBucket) and puts an object into it, but
// cannot create another bucket; the intake user opens and streams that
// object with the bridge's own reader (objectSource) and gets its bytes and
// digest; a reference into a bucket that is not the principal's is never
// opened.
func TestSampleServerConfigObjectStore(t *testing.T) {
	for k, v := range map[string]string{
		"MIGHTYETL_NATS_INTAKE_PASSWORD": "intake-pw", "MIGHTYETL_NATS_WORKER_PASSWORD": "worker-pw",
		"MIGHTYETL_NATS_ALICE_PASSWORD": "alice-pw", "MIGHTYETL_NATS_READER_PASSWORD": "reader-pw",
	} {
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
	connect := func(user, password string, opts ...nats.Option) jetstream.JetStream {
		nc, err := nats.Connect(srv.ClientURL(), append(opts, nats.UserInfo(user, password))...)
		if err != nil {
			t.Fatalf("connect as %s: %v", user, err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, _ := events.NewSubjects(events.DefaultPrefix)
	bucket := s.ObjectBucket("producer-alice")

	alice := connect("producer-alice", "alice-pw", nats.CustomInboxPrefix(events.ReplyInboxPrefix("producer-alice")))
	obs, err := alice.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: bucket})
	if err != nil {
		t.Fatalf("alice creates her bucket: %v", err)
	}
	data := bytes.Repeat([]byte("{\"id\":\"x\"}\n"), 50000) // ~0.5 MB: several chunks
	if _, err := obs.Put(ctx, jetstream.ObjectMeta{Name: "nightly.jsonl"}, bytes.NewReader(data)); err != nil {
		t.Fatalf("alice puts an object: %v", err)
	}
	// Putting it again replaces it (the old chunks are purged).
	if _, err := obs.Put(ctx, jetstream.ObjectMeta{Name: "nightly.jsonl"}, bytes.NewReader(data)); err != nil {
		t.Fatalf("alice replaces an object: %v", err)
	}
	// A request the server's permissions drop gets no answer: give it a
	// bound of its own.
	denied, cancelDenied := context.WithTimeout(ctx, 3*time.Second)
	defer cancelDenied()
	if _, err := alice.CreateObjectStore(denied, jetstream.ObjectStoreConfig{Bucket: s.ObjectBucket("producer-bob")}); err == nil {
		t.Fatal("alice created bob's bucket")
	}

	violations := make(chan error, 16)
	ijs := connect("intake", "intake-pw", nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case violations <- err:
		default:
		}
	}))
	slots := make(chan struct{}, 1)
	src := &objectSource{js: ijs, bucket: bucket, name: "nightly.jsonl", slots: slots}
	stream, err := src.Open(ctx)
	if err != nil {
		t.Fatalf("intake opens alice's object: %v", err)
	}
	got, err := io.ReadAll(stream.Body)
	_ = stream.Body.Close()
	sum := sha256.Sum256(data)
	if err != nil || !bytes.Equal(got, data) || stream.Size != int64(len(data)) || stream.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("intake read %d bytes of %d (size %d, digest %s): %v", len(got), len(data), stream.Size, stream.SHA256, err)
	}
	if len(slots) != 0 {
		t.Fatal("the ingest slot was not released")
	}
	// Every step of the read was permitted (a denied publish, such as the
	// ordered consumer's deletion at Close, is reported asynchronously).
	if err := ijs.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-violations:
		t.Fatalf("intake: %v", err)
	default:
	}
	missing := &objectSource{js: ijs, bucket: bucket, name: "absent.jsonl", slots: slots}
	if _, err := missing.Open(ctx); !errors.Is(err, intake.ErrObjectNotFound) {
		t.Fatalf("absent object: %v", err)
	}
	foreign := &objectSource{js: ijs, bucket: s.ObjectBucket("producer-bob"), name: "x", slots: slots, forbidden: true}
	if _, err := foreign.Open(ctx); !errors.Is(err, intake.ErrObjectNotFound) {
		t.Fatalf("foreign bucket: %v", err)
	}
}

// TestObjectIngestSlots: an object source that finds every ingest slot
// taken says so without touching NATS (the consumer redelivers the request
// later). (TestSampleServerConfigObjectStore checks that a closed stream
// gives its slot back.)
func TestObjectIngestSlots(t *testing.T) {
	slots := make(chan struct{}, 1)
	slots <- struct{}{}
	src := &objectSource{bucket: "B", name: "n", slots: slots}
	if _, err := src.Open(context.Background()); !errors.Is(err, ErrObjectIngestsBusy) {
		t.Fatalf("busy slots: %v", err)
	}
	if len(slots) != 1 {
		t.Fatal("a refused open took or gave back a slot")
	}
}
