package events

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/natstest"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

type call struct {
	principal, key, body string
}

// fakeHandler is a fake of our RequestHandler: it records calls and answers
// from a script keyed by idempotency key.
type fakeHandler struct {
	mu     sync.Mutex
	calls  []call
	script func(n int, c call) ([]byte, string, error) // n = calls so far for this key
	gate   chan struct{}                               // when set, each call waits for a token
}

func (h *fakeHandler) HandleRequest(ctx context.Context, principal, key string, body []byte) ([]byte, string, error) {
	if h.gate != nil {
		select {
		case <-h.gate:
		case <-ctx.Done():
			return nil, "", ctx.Err()
		}
	}
	h.mu.Lock()
	c := call{principal, key, string(body)}
	n := 0
	for _, prev := range h.calls {
		if prev.key == key {
			n++
		}
	}
	h.calls = append(h.calls, c)
	h.mu.Unlock()
	return h.script(n, c)
}

func (h *fakeHandler) callsFor(key string) []call {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []call
	for _, c := range h.calls {
		if c.key == key {
			out = append(out, c)
		}
	}
	return out
}

type requestFixture struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	subjects Subjects
	m        *metrics.Events
	c        *RequestConsumer
}

func newRequestFixture(t *testing.T, h RequestHandler) requestFixture {
	t.Helper()
	nc := natstest.Connect(t, natstest.URL(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := NewSubjects(natstest.Prefix(t))
	m := metrics.NewEvents(nil)
	c, err := NewRequestConsumer(nc, s.Prefix(), h, nil, m, RequestConsumerOptions{
		Concurrency: 2, AckWait: 5 * time.Second, HandlerTimeout: 4 * time.Second, RetryDelay: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("stop consumer: %v", err)
		}
		_ = js.DeleteStream(ctx, s.RequestsStream())
	})
	// Wait until the stream exists before publishing.
	testwait.For(t, 10*time.Second, "request stream", func() bool {
		_, err := js.Stream(t.Context(), s.RequestsStream())
		return err == nil
	})
	return requestFixture{nc: nc, js: js, subjects: s, m: m, c: c}
}

// submit publishes a request through JetStream with a reply inbox and
// returns the inbox subscription.
func (f requestFixture) submit(t *testing.T, subject, key, body string) *nats.Subscription {
	t.Helper()
	inbox := nats.NewInbox()
	sub, err := f.nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	msg := nats.NewMsg(subject)
	msg.Data = []byte(body)
	msg.Header.Set(jetstream.MsgIDHeader, key)
	msg.Header.Set(ReplyToHeader, inbox)
	if _, err := f.js.PublishMsg(t.Context(), msg); err != nil {
		t.Fatalf("publish request: %v", err)
	}
	return sub
}

func (f requestFixture) requestsSubject(t *testing.T, principal string) string {
	t.Helper()
	s, err := f.subjects.Requests(principal)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// settled waits until the consumer has nothing pending and nothing
// unacknowledged. (A terminated message may linger in a work-queue stream on
// older servers until its age limit, but it is never redelivered.)
func (f requestFixture) settled(t *testing.T) {
	t.Helper()
	testwait.For(t, 10*time.Second, "nothing pending and nothing unacknowledged", func() bool {
		cons, err := f.js.Consumer(t.Context(), f.subjects.RequestsStream(), "mightyetl-intake")
		if err != nil {
			return false
		}
		ci, err := cons.Info(t.Context())
		return err == nil && ci.NumAckPending == 0 && ci.NumPending == 0 && ci.Delivered.Consumer > 0
	})
}

// streamEmpty waits until acknowledged messages have left the work queue.
func (f requestFixture) streamEmpty(t *testing.T) {
	t.Helper()
	testwait.For(t, 10*time.Second, "request stream empty", func() bool {
		st, err := f.js.Stream(t.Context(), f.subjects.RequestsStream())
		if err != nil {
			return false
		}
		info, err := st.Info(t.Context())
		return err == nil && info.State.Msgs == 0
	})
}

func TestRequestAcceptedAckedAfterHandlerAndAnswered(t *testing.T) {
	t.Parallel()
	h := &fakeHandler{gate: make(chan struct{}), script: func(int, call) ([]byte, string, error) {
		return []byte(`{"jobId":"x"}`), "", nil
	}}
	f := newRequestFixture(t, h)
	reply := f.submit(t, f.requestsSubject(t, "producer-1"), "key-0000000000000001", `[{"name":"a"}]`)

	// While the handler has not returned, the message is delivered but not acked.
	testwait.For(t, 10*time.Second, "message delivered, ack pending", func() bool {
		cons, err := f.js.Consumer(t.Context(), f.subjects.RequestsStream(), "mightyetl-intake")
		if err != nil {
			return false
		}
		ci, err := cons.Info(t.Context())
		return err == nil && ci.NumAckPending == 1
	})
	h.gate <- struct{}{}
	msg, err := reply.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no reply: %v", err)
	}
	if string(msg.Data) != `{"jobId":"x"}` || msg.Header.Get(ErrorCodeHeader) != "" {
		t.Fatalf("reply = %s %v", msg.Data, msg.Header)
	}
	f.settled(t)
	f.streamEmpty(t)
	calls := h.callsFor("key-0000000000000001")
	if len(calls) != 1 || calls[0].principal != "producer-1" || calls[0].body != `[{"name":"a"}]` {
		t.Fatalf("calls = %+v", calls)
	}
	if got := testutil.ToFloat64(f.m.Requests.WithLabelValues(metrics.RequestAccepted)); got != 1 {
		t.Fatalf("accepted = %v", got)
	}
}

func TestRequestPoisonIsTerminatedWithRejection(t *testing.T) {
	t.Parallel()
	h := &fakeHandler{script: func(int, call) ([]byte, string, error) {
		return nil, "etl_invalid_idempotency_key", nil
	}}
	f := newRequestFixture(t, h)
	rejections, err := f.nc.SubscribeSync(f.subjects.Rejections())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	reply := f.submit(t, f.requestsSubject(t, "producer-1"), "bad key", `[]`)

	msg, err := reply.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no reply: %v", err)
	}
	if msg.Header.Get(ErrorCodeHeader) != "etl_invalid_idempotency_key" {
		t.Fatalf("reply header = %v", msg.Header)
	}
	rej, err := rejections.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no rejection: %v", err)
	}
	var body map[string]any
	if err := json.Unmarshal(rej.Data, &body); err != nil {
		t.Fatal(err)
	}
	if len(body) != 1 || body["errorCode"] != "etl_invalid_idempotency_key" {
		t.Fatalf("rejection = %s, want only the errorCode", rej.Data)
	}
	f.settled(t)
	if n := len(h.callsFor("bad key")); n != 1 {
		t.Fatalf("handler calls = %d, want 1 (terminated, never redelivered)", n)
	}
	if got := testutil.ToFloat64(f.m.Requests.WithLabelValues(metrics.RequestRejected)); got != 1 {
		t.Fatalf("rejected = %v", got)
	}
}

func TestRequestSubjectWithoutSinglePrincipalTokenIsRejected(t *testing.T) {
	t.Parallel()
	h := &fakeHandler{script: func(int, call) ([]byte, string, error) { return nil, "", errors.New("must not be called") }}
	f := newRequestFixture(t, h)
	reply := f.submit(t, f.subjects.Prefix()+".requests.a.b", "key-0000000000000002", `[]`)
	msg, err := reply.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no reply: %v", err)
	}
	if msg.Header.Get(ErrorCodeHeader) != CodePrincipalRequired {
		t.Fatalf("reply header = %v", msg.Header)
	}
	f.settled(t)
	if n := len(h.callsFor("key-0000000000000002")); n != 0 {
		t.Fatalf("handler called %d times", n)
	}
}

func TestRequestTransientErrorIsRedeliveredAndConverges(t *testing.T) {
	t.Parallel()
	h := &fakeHandler{script: func(n int, _ call) ([]byte, string, error) {
		if n < 2 {
			return nil, "", errors.New("database unavailable")
		}
		return []byte(`{"jobId":"same"}`), "", nil
	}}
	f := newRequestFixture(t, h)
	reply := f.submit(t, f.requestsSubject(t, "producer-2"), "key-0000000000000003", `[]`)
	msg, err := reply.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no reply: %v", err)
	}
	if string(msg.Data) != `{"jobId":"same"}` {
		t.Fatalf("reply = %s", msg.Data)
	}
	f.settled(t)
	if n := len(h.callsFor("key-0000000000000003")); n != 3 {
		t.Fatalf("handler calls = %d, want 3 (two transient failures, then success)", n)
	}
	if got := testutil.ToFloat64(f.m.Requests.WithLabelValues(metrics.RequestRetried)); got != 2 {
		t.Fatalf("retried = %v, want 2", got)
	}
}

func TestRequestReplyOnlyToInboxes(t *testing.T) {
	t.Parallel()
	h := &fakeHandler{script: func(int, call) ([]byte, string, error) { return []byte("ok"), "", nil }}
	f := newRequestFixture(t, h)
	// A producer asks for the reply on a lifecycle subject: it is not sent.
	target := f.subjects.Prefix() + ".lifecycle.succeeded"
	spy, err := f.nc.SubscribeSync(target)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(f.requestsSubject(t, "producer-3"))
	msg.Header.Set(jetstream.MsgIDHeader, "key-0000000000000004")
	msg.Header.Set(ReplyToHeader, target)
	if _, err := f.js.PublishMsg(t.Context(), msg); err != nil {
		t.Fatal(err)
	}
	f.settled(t)
	if len(h.callsFor("key-0000000000000004")) != 1 {
		t.Fatal("request not handled")
	}
	// Everything f.nc's consumer published precedes this round trip.
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if m, err := spy.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("reply went to a non-inbox subject: %s", m.Data)
	}
}
