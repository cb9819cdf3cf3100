package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mightyetl/mightyetl/internal/codes"
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

func (h *fakeHandler) HandleRequest(ctx context.Context, req Request) ([]byte, string, error) {
	principal, key, body := req.Principal, req.IdempotencyKey, req.Body
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

func newRequestFixture(t *testing.T, h RequestHandler, tune ...func(*RequestConsumerOptions)) requestFixture {
	t.Helper()
	nc := natstest.Connect(t, natstest.URL(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := NewSubjects(natstest.Prefix(t))
	m := metrics.NewEvents(nil)
	opts := RequestConsumerOptions{
		Concurrency: 2, AckWait: 5 * time.Second, HandlerTimeout: 4 * time.Second, RetryDelay: 20 * time.Millisecond,
		MaxRetryDelay: 20 * time.Millisecond,
	}
	for _, tf := range tune {
		tf(&opts)
	}
	c, err := NewRequestConsumer(nc, s.Prefix(), h, nil, m, opts)
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

// submit publishes a request of principal through JetStream the way the
// producer convention says (docs/operations/nats.md): the key in
// IdempotencyKeyHeader, no Nats-Msg-Id, a reply inbox under
// ReplyInboxPrefix(principal). subject is normally principal's request
// subject. It returns the inbox subscription.
func (f requestFixture) submit(t *testing.T, subject, principal, key, body string) *nats.Subscription {
	t.Helper()
	inbox := NewReplyInbox(principal)
	sub, err := f.nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	msg := nats.NewMsg(subject)
	msg.Data = []byte(body)
	msg.Header.Set(IdempotencyKeyHeader, key)
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
	reply := f.submit(t, f.requestsSubject(t, "producer-1"), "producer-1", "key-0000000000000001", `[{"name":"a"}]`)

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
		return nil, codes.InvalidIdempotencyKey, nil
	}}
	f := newRequestFixture(t, h)
	rejections, err := f.nc.SubscribeSync(f.subjects.Rejections())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	reply := f.submit(t, f.requestsSubject(t, "producer-1"), "producer-1", "bad key", `[]`)

	msg, err := reply.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no reply: %v", err)
	}
	if msg.Header.Get(ErrorCodeHeader) != codes.InvalidIdempotencyKey {
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
	if len(body) != 1 || body["errorCode"] != codes.InvalidIdempotencyKey {
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
	rejections := f.rejections(t)
	// No single principal token, so no inbox the reply could be bound to:
	// the rejection is the only answer.
	reply := f.submit(t, f.subjects.Prefix()+".requests.a.b", "b", "key-0000000000000002", `[]`)
	f.wantRejection(t, rejections, codes.PrincipalRequired)
	f.settled(t)
	if n := len(h.callsFor("key-0000000000000002")); n != 0 {
		t.Fatalf("handler called %d times", n)
	}
	if m, err := reply.NextMsg(100 * time.Millisecond); err == nil {
		t.Fatalf("reply without a principal: %s", m.Data)
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
	reply := f.submit(t, f.requestsSubject(t, "producer-2"), "producer-2", "key-0000000000000003", `[]`)
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

// TestRequestFailingInternallyIsTerminatedAfterMaxDeliveries: a request
// whose handling keeps failing gets MaxDeliveries attempts, then it is
// terminated, answered and rejected payload-free, instead of coming back
// forever.
func TestRequestFailingInternallyIsTerminatedAfterMaxDeliveries(t *testing.T) {
	t.Parallel()
	h := &fakeHandler{script: func(int, call) ([]byte, string, error) {
		return nil, "", errors.New("fails every time")
	}}
	f := newRequestFixture(t, h, func(o *RequestConsumerOptions) { o.MaxDeliveries = 3 })
	rejections := f.rejections(t)
	reply := f.submit(t, f.requestsSubject(t, "producer-5"), "producer-5", "key-0000000000000005", `[{"id":"x"}]`)
	msg, err := reply.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no reply: %v", err)
	}
	if msg.Header.Get(ErrorCodeHeader) != codes.RequestDeliveriesExhausted {
		t.Fatalf("reply header = %v", msg.Header)
	}
	f.wantRejection(t, rejections, codes.RequestDeliveriesExhausted)
	f.settled(t)
	f.streamEmpty(t)
	if n := len(h.callsFor("key-0000000000000005")); n != 3 {
		t.Fatalf("handler calls = %d, want 3 (MaxDeliveries)", n)
	}
	if got := testutil.ToFloat64(f.m.Requests.WithLabelValues(metrics.RequestRetried)); got != 2 {
		t.Fatalf("retried = %v, want 2", got)
	}
	if got := testutil.ToFloat64(f.m.Requests.WithLabelValues(metrics.RequestRejected)); got != 1 {
		t.Fatalf("rejected = %v, want 1", got)
	}
}

func TestRetryDelayGrowsToItsCap(t *testing.T) {
	t.Parallel()
	c := &RequestConsumer{opts: RequestConsumerOptions{}}
	c.opts = c.opts.WithDefaults()
	for delivered, want := range map[uint64]time.Duration{
		1: time.Second, 2: 2 * time.Second, 6: 32 * time.Second, 7: time.Minute, 30: time.Minute, 1 << 40: time.Minute,
	} {
		if got := c.retryDelay(delivered); got != want {
			t.Errorf("retryDelay(%d) = %v, want %v", delivered, got, want)
		}
	}
}

// TestRequestReplyOnlyToTheRequestersInbox: a reply subject outside the
// requester's own inbox prefix (another principal's inbox, any other
// "_INBOX." subject, a lifecycle subject) gets the request rejected,
// unhandled, and nothing is published there.
func TestRequestReplyOnlyToTheRequestersInbox(t *testing.T) {
	t.Parallel()
	h := &fakeHandler{script: func(int, call) ([]byte, string, error) { return []byte("ok"), "", nil }}
	f := newRequestFixture(t, h)
	rejections := f.rejections(t)
	for i, target := range []string{
		ReplyInboxPrefix("producer-4") + ".stolen", // another principal's inbox
		"_INBOX.abcdef", // any inbox, e.g. the intake's own
		f.subjects.Prefix() + ".lifecycle.succeeded",
	} {
		spy, err := f.nc.SubscribeSync(target)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("key-reply-%010d", i)
		msg := nats.NewMsg(f.requestsSubject(t, "producer-3"))
		msg.Header.Set(IdempotencyKeyHeader, key)
		msg.Header.Set(ReplyToHeader, target)
		if _, err := f.js.PublishMsg(t.Context(), msg); err != nil {
			t.Fatal(err)
		}
		f.wantRejection(t, rejections, codes.ReplySubjectForbidden)
		f.settled(t)
		if n := len(h.callsFor(key)); n != 0 {
			t.Fatalf("request with reply subject %q handled %d times", target, n)
		}
		// The consumer publishes any reply before the rejection, over the
		// same connection, and the rejection has arrived.
		if m, err := spy.NextMsg(100 * time.Millisecond); err == nil {
			t.Fatalf("reply went to %q: %s", target, m.Data)
		}
		_ = spy.Unsubscribe()
	}
	// The requester's own inbox is answered.
	reply := f.submit(t, f.requestsSubject(t, "producer-3"), "producer-3", "key-reply-own-0001", `[]`)
	if m, err := reply.NextMsg(10 * time.Second); err != nil || string(m.Data) != "ok" {
		t.Fatalf("own inbox reply = %v, %v", m, err)
	}
}

// TestRequestMsgIDsAreRefused: two principals that use the same
// idempotency key at the same moment both get their job (nothing in a
// request lets the stream take one for a duplicate of the other), the
// handler sees the bare key of IdempotencyKeyHeader, and a request that
// carries a Nats-Msg-Id, which the server deduplicates across principals,
// is rejected unhandled whatever the id.
func TestRequestMsgIDsAreRefused(t *testing.T) {
	t.Parallel()
	h := &fakeHandler{script: func(_ int, c call) ([]byte, string, error) { return []byte(c.principal), "", nil }}
	f := newRequestFixture(t, h)
	rejections := f.rejections(t)
	const key = "key-shared-0000000001"
	for _, p := range []string{"producer-a", "producer-b"} {
		msg := nats.NewMsg(f.requestsSubject(t, p))
		msg.Header.Set(IdempotencyKeyHeader, key)
		ack, err := f.js.PublishMsg(t.Context(), msg)
		if err != nil {
			t.Fatal(err)
		}
		if ack.Duplicate {
			t.Fatalf("%s's request taken for a duplicate", p)
		}
	}
	testwait.For(t, 10*time.Second, "both requests handled with the bare key", func() bool { return len(h.callsFor(key)) == 2 })
	got := map[string]bool{}
	for _, c := range h.callsFor(key) {
		got[c.principal] = true
	}
	if !got["producer-a"] || !got["producer-b"] {
		t.Fatalf("calls = %+v", h.callsFor(key))
	}
	// Any Nats-Msg-Id, with or without a key header: rejected, unhandled.
	for i, id := range []string{"key-msgid-00000001", "producer-c:key-msgid-00000002", "producer-a:" + key} {
		msg := nats.NewMsg(f.requestsSubject(t, "producer-c"))
		msg.Header.Set(jetstream.MsgIDHeader, id)
		if i == 0 {
			msg.Header.Set(IdempotencyKeyHeader, id)
		}
		if _, err := f.js.PublishMsg(t.Context(), msg); err != nil {
			t.Fatal(err)
		}
		f.wantRejection(t, rejections, codes.MsgIDForbidden)
	}
	f.settled(t)
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.calls {
		if c.principal == "producer-c" {
			t.Fatalf("request with a Nats-Msg-Id handled: %+v", c)
		}
	}
}

// TestRequestStreamLimits: the request stream is bounded in bytes and per
// principal, an existing stream without limits gets them, and a principal
// at its limit is refused while another principal is not.
func TestRequestStreamLimits(t *testing.T) {
	t.Parallel()
	nc := natstest.Connect(t, natstest.URL(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := NewSubjects(natstest.Prefix(t))
	// A stream as an older intake made it: no size limits.
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{
		Name: s.RequestsStream(), Subjects: []string{s.RequestsAll()}, Retention: jetstream.WorkQueuePolicy,
		Discard: jetstream.DiscardNew, MaxAge: RequestsMaxAge, Duplicates: RequestsDuplicateWindow, Storage: jetstream.FileStorage,
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), s.RequestsStream()) })
	gate := make(chan struct{}) // never opened: nothing is acknowledged
	h := &fakeHandler{gate: gate, script: func(int, call) ([]byte, string, error) { return nil, "", nil }}
	c, err := NewRequestConsumer(nc, s.Prefix(), h, nil, nil, RequestConsumerOptions{
		Concurrency: 1, AckWait: 5 * time.Second, HandlerTimeout: 4 * time.Second,
		StreamMaxBytes: 1 << 20, StreamMaxPerPrincipal: 2, MaxRequestBytes: 16 << 10,
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
		_ = c.Stop(ctx)
	})
	var cfg jetstream.StreamConfig
	testwait.For(t, 10*time.Second, "stream updated with limits", func() bool {
		st, err := js.Stream(t.Context(), s.RequestsStream())
		if err != nil {
			return false
		}
		info, err := st.Info(t.Context())
		if err != nil {
			return false
		}
		cfg = info.Config
		return cfg.MaxMsgsPerSubject == 2
	})
	if cfg.MaxBytes != 1<<20 || !cfg.DiscardNewPerSubject || cfg.Discard != jetstream.DiscardNew {
		t.Fatalf("stream limits = max_bytes %d, discard_new_per_subject %v, discard %v", cfg.MaxBytes, cfg.DiscardNewPerSubject, cfg.Discard)
	}
	publish := func(principal, key string) error {
		subject, _ := s.Requests(principal)
		msg := nats.NewMsg(subject)
		msg.Header.Set(IdempotencyKeyHeader, key)
		_, err := js.PublishMsg(t.Context(), msg)
		return err
	}
	for i := range 2 {
		if err := publish("producer-x", fmt.Sprintf("key-limit-%08d", i)); err != nil {
			t.Fatalf("request %d within the limit: %v", i, err)
		}
	}
	if err := publish("producer-x", "key-limit-over-0001"); err == nil {
		t.Fatal("a third waiting request of one principal was accepted")
	}
	if err := publish("producer-y", "key-limit-other-001"); err != nil {
		t.Fatalf("another principal refused: %v", err)
	}
}

// TestOnePrincipalCannotFillTheRequestStream: with the product's limits
// scaled down (a 1 MiB stream, 16 KiB requests, the default per-principal
// limit), one principal flooding large requests while nothing is consumed is
// refused after its share, and another principal's request is still stored
// and handled. Limits that would let one principal hold more than its share
// are refused before anything starts.
func TestOnePrincipalCannotFillTheRequestStream(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{}) // closed once the flood is over: nothing is acknowledged before
	h := &fakeHandler{gate: gate, script: func(int, call) ([]byte, string, error) { return []byte("ok"), "", nil }}
	f := newRequestFixture(t, h, func(o *RequestConsumerOptions) {
		o.Concurrency = 1
		o.StreamMaxBytes = 1 << 20
		o.MaxRequestBytes = 16 << 10
	})
	publish := func(principal, key string, body []byte) error {
		msg := nats.NewMsg(f.requestsSubject(t, principal))
		msg.Header.Set(IdempotencyKeyHeader, key)
		msg.Data = body
		_, err := f.js.PublishMsg(t.Context(), msg)
		return err
	}
	big := make([]byte, 16000)
	stored := 0
	for ; stored < 1000; stored++ {
		if err := publish("mallory", fmt.Sprintf("key-flood-%010d", stored), big); err != nil {
			break
		}
	}
	share := RequestsMaxPerPrincipalFor(1<<20, 16<<10)
	if stored == 0 || int64(stored) > share {
		t.Fatalf("one principal stored %d requests, want 1..%d (a tenth of the stream)", stored, share)
	}
	if err := publish("alice", "key-alice-0000000001", []byte(`[{"id":"a1"}]`)); err != nil {
		t.Fatalf("another principal refused after the flood: %v", err)
	}
	close(gate)
	testwait.For(t, 10*time.Second, "alice's request handled", func() bool { return len(h.callsFor("key-alice-0000000001")) == 1 })

	// Explicit limits beyond one principal's share are refused.
	_, err := NewRequestConsumer(f.nc, f.subjects.Prefix(), h, nil, nil, RequestConsumerOptions{
		StreamMaxBytes: 1 << 20, MaxRequestBytes: 16 << 10, StreamMaxPerPrincipal: share + 1,
	})
	if !errors.Is(err, ErrPrincipalShareTooLarge) {
		t.Fatalf("limits beyond a principal's share: %v", err)
	}
}

// TestRequestsLimitsBoundOnePrincipal: the defaults give one principal at
// most a tenth of the stream, a default limit shrinks to fit a stream too
// small for it, and Validate names what would fit.
func TestRequestsLimitsBoundOnePrincipal(t *testing.T) {
	t.Parallel()
	product := RequestsLimits{MaxMsgSize: 1 << 20}.WithDefaults()
	if product.MaxPerPrincipal != DefaultRequestsMaxPerPrincipal || product.Validate() != nil ||
		product.MaxPerPrincipal*(1<<20+RequestStoreOverhead)*RequestsPrincipalShares > product.MaxBytes {
		t.Fatalf("product defaults %+v: %v", product, product.Validate())
	}
	small := RequestsLimits{MaxBytes: 1 << 20, MaxMsgSize: 16 << 10}.WithDefaults()
	if small.MaxPerPrincipal != 5 || small.Validate() != nil {
		t.Fatalf("scaled-down defaults %+v: %v", small, small.Validate())
	}
	tiny := RequestsLimits{MaxBytes: 1 << 20, MaxMsgSize: 1 << 20}.WithDefaults()
	if tiny.MaxPerPrincipal != 1 || !errors.Is(tiny.Validate(), ErrPrincipalShareTooLarge) {
		t.Fatalf("stream smaller than ten messages %+v: %v", tiny, tiny.Validate())
	}
	over := RequestsLimits{MaxPerPrincipal: 10000, MaxMsgSize: 1 << 20}.WithDefaults()
	err := over.Validate()
	if !errors.Is(err, ErrPrincipalShareTooLarge) || !strings.Contains(err.Error(), "at most 101 per principal") ||
		!strings.Contains(err.Error(), fmt.Sprint(over.MinStreamBytes())) || over.MinStreamBytes() != 10000*(1<<20+RequestStoreOverhead)*10 {
		t.Fatalf("10,000 requests of 1 MiB in 1 GiB: %v", err)
	}
	if (RequestsLimits{MaxPerPrincipal: 10000}).WithDefaults().Validate() != nil {
		t.Fatal("limits with the server's message size are checked before it is known")
	}
}

// rejections subscribes to the rejection subject.
func (f requestFixture) rejections(t *testing.T) *nats.Subscription {
	t.Helper()
	sub, err := f.nc.SubscribeSync(f.subjects.Rejections())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return sub
}

// wantRejection waits for the next rejection and checks that it is exactly
// {"errorCode": code}.
func (f requestFixture) wantRejection(t *testing.T, sub *nats.Subscription, code string) {
	t.Helper()
	rej, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no rejection (want %s): %v", code, err)
	}
	var body map[string]any
	if err := json.Unmarshal(rej.Data, &body); err != nil {
		t.Fatal(err)
	}
	if len(body) != 1 || body["errorCode"] != code {
		t.Fatalf("rejection = %s, want only errorCode %s", rej.Data, code)
	}
}
