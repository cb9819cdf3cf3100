package clientcontract_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mightyetl/mightyetl/client"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

// publishRaw publishes body on subject through JetStream as principal's
// connection would, with key in the idempotency-key header and a reply
// inbox, bypassing the Producer's own checks, and returns the error code of
// the intake's answer ("" for a job).
func (s *stack) publishRaw(ctx context.Context, principal, subject, key, body string) string {
	s.t.Helper()
	nc, err := nats.Connect(s.natsURL, client.InboxOption(principal))
	if err != nil {
		s.t.Fatal(err)
	}
	defer nc.Close()
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		s.t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		s.t.Fatal(err)
	}
	msg := nats.NewMsg(subject)
	msg.Data = []byte(body)
	msg.Header.Set(client.IdempotencyKeyHeader, key)
	msg.Header.Set(client.ReplyToHeader, inbox)
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		s.t.Fatal(err)
	}
	m, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		s.t.Fatalf("no answer from the intake: %v", err)
	}
	return m.Header.Get(client.ErrorCodeHeader)
}

func (s *stack) producer(principal string) *client.Producer {
	s.t.Helper()
	nc, err := nats.Connect(s.natsURL, client.InboxOption(principal))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(nc.Close)
	p, err := client.NewProducer(nc, principal, client.ProducerOptions{Prefix: s.prefix, MaxPayloadBytes: 65536})
	if err != nil {
		s.t.Fatal(err)
	}
	return p
}

// TestProducerConventionsMatchTheIntake pins the package's copies of the
// request conventions to the intake's own.
func TestProducerConventionsMatchTheIntake(t *testing.T) {
	if client.ReplyToHeader != events.ReplyToHeader || client.ErrorCodeHeader != events.ErrorCodeHeader ||
		client.IdempotencyKeyHeader != events.IdempotencyKeyHeader || client.InboxPrefix("p") != events.ReplyInboxPrefix("p") ||
		client.DefaultPriority != pg.DefaultPriority || client.HighestPriority != pg.HighestPriority || client.LowestPriority != pg.LowestPriority {
		t.Fatal("client NATS conventions differ from internal/events")
	}
	// The schedule headers: one name each for the client, the NATS
	// consumer and the HTTP intake.
	for _, names := range [][3]string{
		{client.PriorityHeader, events.PriorityHeader, intake.PriorityHeader},
		{client.NotBeforeHeader, events.NotBeforeHeader, intake.NotBeforeHeader},
	} {
		if names[0] != names[1] || names[0] != names[2] {
			t.Errorf("schedule header %q (client), %q (events), %q (intake)", names[0], names[1], names[2])
		}
	}
	for _, c := range codes.Rejections {
		if !declaredCodes(t)[c] {
			t.Errorf("NATS code %s has no client constant", c)
		}
	}
}

// TestProducerPublishesAndGetsTheJob: a request published through the real
// intake's request consumer becomes a job the HTTP client of the same
// principal sees and the worker runs; publishing it again (same key, same
// bytes) answers the same job, replayed, and the database holds one job.
func TestProducerPublishesAndGetsTheJob(t *testing.T) {
	s := newStack(t, true)
	p := s.producer(testUser)
	ctx := ctxT(t, 2*time.Minute)
	if p.Subject() != s.prefix+".requests."+testUser {
		t.Fatalf("subject %q", p.Subject())
	}
	sub, err := p.PublishAndWait(ctx, []byte(sample), "")
	if err != nil {
		t.Fatal(err)
	}
	if sub.Replayed || sub.JobID == "" || !strings.HasPrefix(sub.Key, "mightyetl-") || sub.StatusURL != "/api/etl/jobs/"+sub.JobID {
		t.Fatalf("answer %+v", sub)
	}
	j, err := s.client().Wait(ctx, sub.JobID)
	if err != nil || j.Status != client.StatusSucceeded {
		t.Fatalf("job %+v, %v", j, err)
	}
	// The same request again, twice at once: Publish, then PublishAndWait
	// with the same key (both stored; the database converges them): one
	// job, the answer replayed.
	pub, err := p.Publish(ctx, []byte(sample), sub.Key)
	if err != nil || pub.Key != sub.Key || pub.Sequence == 0 {
		t.Fatalf("publish %+v, %v", pub, err)
	}
	again, err := p.PublishAndWait(ctx, []byte(sample), sub.Key)
	if err != nil || again.JobID != sub.JobID || !again.Replayed {
		t.Fatalf("republished %+v, %v", again, err)
	}
	if n := s.countJobs(); n != 1 {
		t.Fatalf("%d jobs, want 1", n)
	}
	// Other bytes with the same key: a typed problem.
	_, err = p.PublishAndWait(ctx, []byte(`[{"id":"other"}]`), sub.Key)
	var pe *client.Error
	if !errors.As(err, &pe) || pe.Code != client.CodeSubmissionKeyReused {
		t.Fatalf("key reused: %v", err)
	}
}

// TestForgedMsgIDsCannotKeepAnotherPrincipalsRequestOut: Mallory floods the
// request stream from her own subject with Nats-Msg-Ids made of Alice's
// name and key, before and while Alice publishes; every request of Alice's
// still reaches the intake and Alice gets her job, and the forged messages
// are rejected without making a job.
func TestForgedMsgIDsCannotKeepAnotherPrincipalsRequestOut(t *testing.T) {
	s := newStack(t, false)
	alice := s.producer(testUser)
	ctx := ctxT(t, time.Minute)
	const key = "key-forged-00000000001"
	forged := []string{testUser + ":" + key, key}
	mallory, err := nats.Connect(s.natsURL, client.InboxOption("mallory"))
	if err != nil {
		t.Fatal(err)
	}
	defer mallory.Close()
	flood := func() {
		for _, id := range forged {
			m := nats.NewMsg(s.prefix + ".requests.mallory")
			m.Data = []byte(sample)
			m.Header.Set("Nats-Msg-Id", id)
			_ = mallory.PublishMsg(m) // the stream stores it (or not): no ack needed
		}
	}
	flood()
	if err := mallory.Flush(); err != nil {
		t.Fatal(err)
	}
	floodCtx, stopFlood := context.WithCancel(ctx)
	flooding := make(chan struct{})
	go func() {
		defer close(flooding)
		for floodCtx.Err() == nil {
			flood()
			time.Sleep(3 * time.Millisecond)
		}
	}()
	first, err := alice.PublishAndWait(ctx, []byte(sample), key)
	if err != nil || first.JobID == "" {
		t.Fatalf("during the flood: %+v, %v", first, err)
	}
	again, err := alice.PublishAndWait(ctx, []byte(sample), key)
	stopFlood()
	<-flooding
	if err != nil || again.JobID != first.JobID || !again.Replayed {
		t.Fatalf("again during the flood: %+v, %v", again, err)
	}
	if n := s.countJobs(); n != 1 {
		t.Fatalf("%d jobs, want Alice's one", n)
	}
}

// TestProducerPoisonRequestsAreTypedProblems: invalid requests are
// terminated by the intake and come back as *Error answers and as
// rejections; an oversized one is refused before publishing.
func TestProducerPoisonRequestsAreTypedProblems(t *testing.T) {
	s := newStack(t, false)
	p := s.producer("bob")
	ctx := ctxT(t, time.Minute)
	var mu sync.Mutex
	var rejected []client.ErrorCode
	rs, err := p.Rejections(func(e *client.Error) {
		mu.Lock()
		defer mu.Unlock()
		rejected = append(rejected, e.Code)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rs.Unsubscribe() }()
	cases := []struct {
		body, key string
		code      client.ErrorCode
	}{
		{`{"id":"a"}`, "", client.CodeInvalidJSON},
		{`not json`, "", client.CodeInvalidJSON},
		{`[{"name":"no id"}]`, "", client.CodeInvalidRecord},
		{sample, "short", client.CodeInvalidIdempotencyKey},
		{"[" + strings.Repeat(`{"id":"x"},`, 50) + `{"id":"y"}]`, "", client.CodeBatchTooLarge},
	}
	for _, c := range cases {
		if c.code == client.CodeInvalidIdempotencyKey {
			// The Producer refuses a bad key before publishing, so this
			// request goes out by hand, as any other client could send it.
			if code := s.publishRaw(ctx, "bob", p.Subject(), c.key, c.body); code != string(c.code) {
				t.Fatalf("key %q by hand: answer %q, want %s", c.key, code, c.code)
			}
			continue
		}
		_, err := p.PublishAndWait(ctx, []byte(c.body), c.key)
		var pe *client.Error
		if !errors.As(err, &pe) || pe.Code != c.code || pe.Status != 0 {
			t.Fatalf("%q: %v, want %s", c.body, err, c.code)
		}
	}
	testwait.For(t, 30*time.Second, "five rejections", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(rejected) == len(cases)
	})
	for i, c := range cases {
		if rejected[i] != c.code {
			t.Fatalf("rejection %d: %s, want %s", i, rejected[i], c.code)
		}
	}
	var pe *client.Error
	if _, err := p.PublishAndWait(ctx, []byte(sample), "short"); !errors.As(err, &pe) || pe.Code != client.CodeInvalidIdempotencyKey {
		t.Fatalf("a bad key through the Producer: %v, want %s before publishing", err, client.CodeInvalidIdempotencyKey)
	}
	_, err = p.Publish(ctx, []byte(`[{"id":"a","pad":"`+strings.Repeat("x", 70_000)+`"}]`), "")
	if !errors.As(err, &pe) || pe.Code != client.CodePayloadTooLarge {
		t.Fatalf("oversized: %v", err)
	}
	if n := s.countJobs(); n != 0 {
		t.Fatalf("%d jobs from poison requests", n)
	}
	if _, err := client.NewProducer(nil, "a.b", client.ProducerOptions{}); err == nil {
		t.Fatal("a principal with a dot was accepted")
	}
}
