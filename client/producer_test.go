package client_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mightyetl/mightyetl/client"
)

// The end-to-end tests of the Producer against the real intake live in the
// service's module (internal/clientcontract); these pin the Producer's wire
// conventions against a bare JetStream stream, with the nats.go version this
// module requires.

// natsConn connects to TEST_NATS_URL, else the local default; it fails the
// test when neither answers.
func natsConn(t *testing.T, principal string) *nats.Conn {
	t.Helper()
	url := os.Getenv("TEST_NATS_URL")
	if url == "" {
		url = nats.DefaultURL
	}
	nc, err := nats.Connect(url, client.InboxOption(principal), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("NATS at %s: %v (set TEST_NATS_URL or start nats-server -js)", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// requestStream creates a memory stream for prefix's requests that
// deduplicates Nats-Msg-Id for a minute, so a message carrying an id
// published before is dropped whenever the test publishes it.
func requestStream(t *testing.T, nc *nats.Conn, prefix string) jetstream.Stream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: prefix + "_requests", Subjects: []string{prefix + ".requests.>"},
		Storage: jetstream.MemoryStorage, Duplicates: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), prefix+"_requests") })
	return s
}

func testPrefix() string { return fmt.Sprintf("clienttest%d", time.Now().UnixNano()) }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestProducerPublishesWithTheConventions: Publish stores the bytes on
// "<prefix>.requests.<principal>" with the bare key in IdempotencyKeyHeader,
// no Nats-Msg-Id and no reply header; the same key again is stored again
// (the intake's database converges the copies); an oversized request is
// refused before publishing.
func TestProducerPublishesWithTheConventions(t *testing.T) {
	nc := natsConn(t, "alice")
	prefix := testPrefix()
	stream := requestStream(t, nc, prefix)
	ctx := testCtx(t)
	p, err := client.NewProducer(nc, "alice", client.ProducerOptions{Prefix: prefix, MaxPayloadBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if p.Subject() != prefix+".requests.alice" {
		t.Fatalf("subject %q", p.Subject())
	}
	body := []byte(`[{"id":"a1"}]`)
	pub, err := p.Publish(ctx, body, "")
	if err != nil || pub.Sequence != 1 || len(pub.Key) < 16 {
		t.Fatalf("publish %+v, %v", pub, err)
	}
	m, err := stream.GetMsg(ctx, pub.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != p.Subject() || string(m.Data) != string(body) ||
		m.Header.Get(client.IdempotencyKeyHeader) != pub.Key || len(m.Header.Values(jetstream.MsgIDHeader)) != 0 ||
		m.Header.Get(client.ReplyToHeader) != "" {
		t.Fatalf("stored %s %q %v", m.Subject, m.Data, m.Header)
	}
	again, err := p.Publish(ctx, body, pub.Key)
	if err != nil || again.Sequence != 2 || again.Key != pub.Key {
		t.Fatalf("republish %+v, %v", again, err)
	}
	_, err = p.Publish(ctx, []byte(`[{"id":"a","pad":"`+strings.Repeat("x", 1024)+`"}]`), "")
	var pe *client.Error
	if !errors.As(err, &pe) || pe.Code != client.CodePayloadTooLarge || pe.Status != 0 {
		t.Fatalf("oversized: %v", err)
	}
	info, err := stream.Info(ctx)
	if err != nil || info.State.Msgs != 2 {
		t.Fatalf("stream holds %+v, %v; want the request and its copy", info, err)
	}
	for _, bad := range []string{"", "a.b", "a*", "a>", "a b"} {
		if _, err := client.NewProducer(nc, bad, client.ProducerOptions{}); err == nil {
			t.Errorf("principal %q accepted", bad)
		}
	}
}

// TestProducerPublishAndWaitReadsTheAnswer: PublishAndWait names an inbox
// under "_INBOX.<principal>." in the reply header and returns the answer
// sent there, a Submission or a problem (*Error with Status zero).
func TestProducerPublishAndWaitReadsTheAnswer(t *testing.T) {
	nc := natsConn(t, "bob")
	prefix := testPrefix()
	requestStream(t, nc, prefix)
	ctx := testCtx(t)
	// A stand-in intake: answers every request on its reply inbox.
	intake := natsConn(t, "intake")
	var mu sync.Mutex
	var inboxes []string
	sub, err := intake.Subscribe(prefix+".requests.bob", func(m *nats.Msg) {
		to := m.Header.Get(client.ReplyToHeader)
		mu.Lock()
		inboxes = append(inboxes, to)
		mu.Unlock()
		answer := nats.NewMsg(to)
		if string(m.Data) == "bad" {
			answer.Header.Set(client.ErrorCodeHeader, string(client.CodeInvalidJSON))
			answer.Data = []byte(`{"title":"Invalid JSON","detail":"not an array"}`)
		} else {
			key := m.Header.Get(client.IdempotencyKeyHeader)
			answer.Data = fmt.Appendf(nil, `{"jobRecordId":"job-1","jobStatus":"PENDING","statusUrl":"/api/etl/jobs/job-1","idempotencyKey":%q}`, key)
		}
		_ = intake.PublishMsg(answer)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := intake.Flush(); err != nil {
		t.Fatal(err)
	}
	p, err := client.NewProducer(nc, "bob", client.ProducerOptions{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.PublishAndWait(ctx, []byte(`[{"id":"b1"}]`), "key-0000000000000001")
	if err != nil || s.JobID != "job-1" || s.Status != client.StatusPending || s.Key != "key-0000000000000001" || s.Replayed {
		t.Fatalf("answer %+v, %v", s, err)
	}
	_, err = p.PublishAndWait(ctx, []byte("bad"), "")
	var pe *client.Error
	if !errors.As(err, &pe) || pe.Code != client.CodeInvalidJSON || pe.Status != 0 || pe.Detail != "not an array" {
		t.Fatalf("problem answer: %v", err)
	}
	mu.Lock()
	for _, to := range inboxes {
		if !strings.HasPrefix(to, client.InboxPrefix("bob")+".") || to == client.InboxPrefix("bob")+"." {
			t.Errorf("reply inbox %q not under %s", to, client.InboxPrefix("bob"))
		}
	}
	if len(inboxes) != 2 || inboxes[0] == inboxes[1] {
		t.Errorf("inboxes %q, want two distinct", inboxes)
	}
	mu.Unlock()
}

// TestForgedMsgIDsCannotKeepARequestOut: while another principal floods the
// stream with Nats-Msg-Ids made of this principal's name and key (in any
// form an older convention or a guess could use), every request of this
// principal is stored and answered: it carries no id the server could
// deduplicate.
func TestForgedMsgIDsCannotKeepARequestOut(t *testing.T) {
	nc := natsConn(t, "alice")
	prefix := testPrefix()
	stream := requestStream(t, nc, prefix)
	ctx := testCtx(t)
	const key = "key-forged-0000000001"
	forged := []string{"alice:" + key, key, `"` + key + `"`, "alice:\"" + key + `"`}
	mallory := natsConn(t, "mallory")
	mjs, err := jetstream.New(mallory)
	if err != nil {
		t.Fatal(err)
	}
	// The forger's ids are in the window before Alice publishes.
	for _, id := range forged {
		m := nats.NewMsg(prefix + ".requests.mallory")
		m.Header.Set(jetstream.MsgIDHeader, id)
		if _, err := mjs.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	floodCtx, stopFlood := context.WithCancel(ctx)
	flooded := make(chan struct{})
	go func() {
		defer close(flooded)
		for i := 0; floodCtx.Err() == nil; i++ {
			m := nats.NewMsg(prefix + ".requests.mallory")
			m.Header.Set(jetstream.MsgIDHeader, forged[i%len(forged)])
			_, _ = mjs.PublishMsg(floodCtx, m)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	defer func() { stopFlood(); <-flooded }()

	// A stand-in intake answers Alice's stored requests, read from the
	// stream itself: only a stored request can be answered.
	intake := natsConn(t, "intake")
	ijs, err := jetstream.New(intake)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := ijs.CreateConsumer(ctx, stream.CachedInfo().Config.Name, jetstream.ConsumerConfig{
		FilterSubject: prefix + ".requests.alice", AckPolicy: jetstream.AckNonePolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		answer := nats.NewMsg(m.Headers().Get(client.ReplyToHeader))
		answer.Data = fmt.Appendf(nil, `{"jobRecordId":"job-%s","jobStatus":"PENDING","statusUrl":"/api/etl/jobs/job-1"}`, m.Headers().Get(client.IdempotencyKeyHeader))
		_ = intake.PublishMsg(answer)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()

	p, err := client.NewProducer(nc, "alice", client.ProducerOptions{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		s, err := p.PublishAndWait(ctx, []byte(`[{"id":"a1"}]`), key)
		if err != nil || s.JobID != "job-"+key {
			t.Fatalf("request %d during the flood: %+v, %v", i, s, err)
		}
	}
}

// TestProducerRejectionsAreTypedCodes: every advisory on
// "<prefix>.rejections" that carries an errorCode reaches the handler as an
// *Error with that code; other messages are ignored.
func TestProducerRejectionsAreTypedCodes(t *testing.T) {
	nc := natsConn(t, "carol")
	prefix := testPrefix()
	p, err := client.NewProducer(nc, "carol", client.ProducerOptions{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *client.Error, 4)
	rs, err := p.Rejections(func(e *client.Error) { got <- e })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Unsubscribe() })
	for _, body := range []string{`{"errorCode":"etl_invalid_record"}`, `not json`, `{}`, `{"errorCode":"etl_invalid_json"}`} {
		if err := nc.Publish(prefix+".rejections", []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []client.ErrorCode{client.CodeInvalidRecord, client.CodeInvalidJSON} {
		select {
		case e := <-got:
			if e.Code != want || e.Status != 0 {
				t.Fatalf("rejection %+v, want %s", e, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no rejection %s within 10s", want)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-got:
		t.Fatalf("unexpected rejection %+v", e)
	default:
	}
}
