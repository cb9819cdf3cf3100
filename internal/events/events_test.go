package events

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/natstest"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestValidatePrefix(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		prefix string
		ok     bool
	}{
		{"mightyetl", true},
		{"tenant-a.etl", true},
		{"a_b.c-d.E9", true},
		{"", false},
		{".a", false},
		{"a.", false},
		{"a..b", false},
		{"a.*", false},
		{"a.>", false},
		{"a b", false},
		{"a/b", false},
		{strings.Repeat("a", 129), false},
	} {
		err := ValidatePrefix(tc.prefix)
		if (err == nil) != tc.ok {
			t.Errorf("ValidatePrefix(%q) = %v, want ok=%v", tc.prefix, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidPrefix) {
			t.Errorf("ValidatePrefix(%q) = %v, want ErrInvalidPrefix", tc.prefix, err)
		}
	}
}

func TestSubjects(t *testing.T) {
	t.Parallel()
	s, err := NewSubjects("tenant-a.etl")
	if err != nil {
		t.Fatal(err)
	}
	lc, _ := s.Lifecycle("SUCCEEDED")
	req, _ := s.Requests("producer-1")
	for got, want := range map[string]string{
		s.JobsAvailable():   "tenant-a.etl.jobs.available",
		s.JobsRevoked():     "tenant-a.etl.jobs.revoked",
		lc:                  "tenant-a.etl.lifecycle.succeeded",
		s.LifecycleAll():    "tenant-a.etl.lifecycle.>",
		req:                 "tenant-a.etl.requests.producer-1",
		s.RequestsAll():     "tenant-a.etl.requests.>",
		s.Rejections():      "tenant-a.etl.rejections",
		s.LifecycleStream(): "TENANT-A_ETL_LIFECYCLE",
		s.RequestsStream():  "TENANT-A_ETL_REQUESTS",
	} {
		if got != want {
			t.Errorf("subject %q, want %q", got, want)
		}
	}
	if _, err := s.Lifecycle("a.b"); err == nil {
		t.Error("Lifecycle accepted a multi-token status")
	}
	if _, err := s.Requests("*"); err == nil {
		t.Error("Requests accepted a wildcard principal")
	}
	for subject, want := range map[string]string{
		"tenant-a.etl.requests.p1":   "p1",
		"tenant-a.etl.requests.p1.x": "",
		"tenant-a.etl.requests.":     "",
		"tenant-a.etl.other.p1":      "",
		"other.requests.p1":          "",
	} {
		got, ok := s.principalOf(subject)
		if got != want || ok != (want != "") {
			t.Errorf("principalOf(%q) = %q, %v; want %q", subject, got, ok, want)
		}
	}
}

func TestCloudEventEnvelope(t *testing.T) {
	t.Parallel()
	job := uuid.MustParse("0b9d5a7e-8c1f-4e53-9a51-2f7c6a1d3e40")
	at := time.Date(2026, 3, 1, 12, 30, 0, 123000000, time.FixedZone("x", 3600))
	s, _ := NewSubjects("mightyetl")
	msg, err := LifecycleMsg(s, "", Lifecycle{OutboxID: 42, JobID: job, Status: "FAILED", AttemptCount: 3, Code: "etl_record_invalid", OccurredAt: at})
	if err != nil {
		t.Fatal(err)
	}
	if msg.Subject != "mightyetl.lifecycle.failed" || msg.Header.Get(jetstream.MsgIDHeader) != "42" ||
		msg.Header.Get("Content-Type") != CloudEventsContentType {
		t.Fatalf("message = %s %v", msg.Subject, msg.Header)
	}
	want := `{"specversion":"1.0","id":"42","source":"urn:mightyetl:relay","type":"io.mightyetl.job.failed",` +
		`"time":"2026-03-01T11:30:00.123Z","datacontenttype":"application/json",` +
		`"data":{"jobRecordId":"0b9d5a7e-8c1f-4e53-9a51-2f7c6a1d3e40","jobStatus":"FAILED","attemptCount":3,"failureCode":"etl_record_invalid"}}`
	if string(msg.Data) != want {
		t.Fatalf("envelope\n got %s\nwant %s", msg.Data, want)
	}
	ce := NewCloudEvent("urn:x", Lifecycle{OutboxID: 1, JobID: job, Status: "CANCELLED", Code: "etl_job_cancelled_by_owner"})
	if ce.Source != "urn:x" || ce.Data.CancellationCode != "etl_job_cancelled_by_owner" || ce.Data.FailureCode != "" {
		t.Fatalf("cancelled envelope = %+v", ce)
	}
	ce = NewCloudEvent("", Lifecycle{OutboxID: 1, JobID: job, Status: "SUCCEEDED", Code: "ignored_code"})
	if ce.Data.CancellationCode != "" || ce.Data.FailureCode != "" {
		t.Fatalf("succeeded envelope carries a code: %+v", ce)
	}
	if _, err := LifecycleMsg(s, "", Lifecycle{Status: "BAD.STATUS"}); err == nil {
		t.Fatal("LifecycleMsg accepted a status that is not a token")
	}
}

func TestParseJobID(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	for body, ok := range map[string]bool{
		id.String():                              true,
		" " + id.String() + "\n":                 true,
		"":                                       false,
		"not-a-uuid":                             false,
		uuid.Nil.String():                        false,
		"{" + id.String() + "}":                  false,
		"urn:uuid:" + id.String():                false,
		strings.ReplaceAll(id.String(), "-", ""): false,
	} {
		got, parsed := parseJobID([]byte(body))
		if parsed != ok || (ok && got != id) {
			t.Errorf("parseJobID(%q) = %s, %v; want ok=%v", body, got, parsed, ok)
		}
	}
}

func FuzzParseJobID(f *testing.F) {
	f.Add([]byte(uuid.New().String()))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, ok := parseJobID(b)
		if ok && (id == uuid.Nil || id.String() != strings.ToLower(strings.TrimSpace(string(b)))) {
			t.Fatalf("parseJobID(%q) = %s", b, id)
		}
	})
}

// TestReplyAllowedOnlyUnderThePrincipalsInbox pins the reply rule: a
// literal subject under "_INBOX.<principal>." and nothing else, in
// particular not another principal's inbox or the intake's own.
func TestReplyAllowedOnlyUnderThePrincipalsInbox(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		principal, subject string
		ok                 bool
	}{
		{"alice", "_INBOX.alice.abc", true},
		{"alice", "_INBOX.alice.abc.def", true},
		{"alice", "_INBOX.abc", false},
		{"alice", "_INBOX.bob.abc", false},
		{"alice", "_INBOX.alicex.abc", false},
		{"alice", "_INBOX.alice", false},
		{"alice", "_INBOX.alice.", false},
		{"alice", "_INBOX.alice..b", false},
		{"alice", "_INBOX.alice.*", false},
		{"alice", "_INBOX.alice.>", false},
		{"alice", "_INBOX.alice.a b", false},
		{"alice", "_inbox.alice.abc", false},
		{"alice", "mightyetl.lifecycle.succeeded", false},
		{"alice", "", false},
		{"", "_INBOX..abc", false},
		{"alice", "_INBOX.alice." + strings.Repeat("a", 250), false},
	} {
		if replyAllowed(c.principal, c.subject) != c.ok {
			t.Errorf("replyAllowed(%q, %q) = %v, want %v", c.principal, c.subject, !c.ok, c.ok)
		}
	}
}

// FuzzReplyAllowed: whatever a producer puts in the header, an allowed reply
// subject lies under the principal's own inbox prefix and has no wildcard.
func FuzzReplyAllowed(f *testing.F) {
	f.Add("alice", "_INBOX.alice.x")
	f.Add("alice", "_INBOX.bob.x")
	f.Add("alice", "_INBOX.alice.>")
	f.Fuzz(func(t *testing.T, principal, subject string) {
		if !replyAllowed(principal, subject) {
			return
		}
		if !strings.HasPrefix(subject, "_INBOX."+principal+".") || strings.ContainsAny(subject, "*> \t\r\n") ||
			strings.Contains(subject, "..") || strings.HasSuffix(subject, ".") {
			t.Fatalf("replyAllowed(%q, %q)", principal, subject)
		}
	})
}

// logCounter counts log records by message.
type logCounter struct {
	mu   sync.Mutex
	msgs map[string]int
}

func (l *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCounter) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.msgs == nil {
		l.msgs = map[string]int{}
	}
	l.msgs[r.Message]++
	return nil
}
func (l *logCounter) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCounter) WithGroup(string) slog.Handler      { return l }
func (l *logCounter) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.msgs[msg]
}

const (
	logUnavailable = "nats unavailable; continuing on database polling and reconnecting in the background"
	logAvailable   = "nats connection available"
)

func TestConnectSurvivesOutagesAndLogsEachOnce(t *testing.T) {
	t.Parallel()
	srv := natstest.StartServer(t)
	srv.Stop() // the process starts while NATS is down
	logs := &logCounter{}
	m := metrics.NewEvents(nil)
	nc, err := Connect(t.Context(), Options{URL: srv.URL(), Name: "events-test", ReconnectWait: 20 * time.Millisecond}, slog.New(logs), m)
	if err != nil {
		t.Fatalf("connect with NATS down: %v", err)
	}
	defer nc.Close()
	if got := testutil.ToFloat64(m.Connected); got != 0 {
		t.Fatalf("connected gauge = %v while down", got)
	}
	woke := make(chan struct{}, 16)
	sub, err := SubscribeWakeups(nc, "mightyetl", m, func() { woke <- struct{}{} })
	if err != nil {
		t.Fatalf("subscribe while down: %v", err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	// Many reconnect attempts fail in the meantime; the outage is logged once.
	time.Sleep(200 * time.Millisecond)
	srv.Start()
	testwait.For(t, 10*time.Second, "connected", func() bool { return testutil.ToFloat64(m.Connected) == 1 })
	srv.Stop()
	testwait.For(t, 10*time.Second, "disconnected", func() bool { return testutil.ToFloat64(m.Connected) == 0 })
	time.Sleep(200 * time.Millisecond)
	srv.Start()
	testwait.For(t, 10*time.Second, "reconnected", func() bool { return testutil.ToFloat64(m.Connected) == 1 })

	if got := logs.count(logUnavailable); got != 2 {
		t.Errorf("outage log lines = %d, want 2 (one per outage)", got)
	}
	if got := logs.count(logAvailable); got != 2 {
		t.Errorf("recovery log lines = %d, want 2", got)
	}
	if got := testutil.ToFloat64(m.Outages); got != 2 {
		t.Errorf("outages = %v, want 2", got)
	}
	// The subscription made while down works after the reconnects.
	if err := nc.Publish("mightyetl.jobs.available", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-woke:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up after reconnect")
	}
	if got := testutil.ToFloat64(m.WakeupsReceived.WithLabelValues(metrics.WakeupAvailable)); got != 1 {
		t.Errorf("wake-ups received = %v, want 1", got)
	}
}

// TestClosingIsNoOutage: closing or draining a connected connection logs
// no "nats unavailable" line and counts no outage (nats.go reports a
// disconnect on the way to closed).
func TestClosingIsNoOutage(t *testing.T) {
	t.Parallel()
	url := natstest.URL(t)
	for _, end := range []struct {
		name string
		do   func(*nats.Conn) error
	}{
		{"Close", func(nc *nats.Conn) error { nc.Close(); return nil }},
		{"Drain", func(nc *nats.Conn) error { return nc.Drain() }},
	} {
		logs := &logCounter{}
		m := metrics.NewEvents(nil)
		nc, err := Connect(t.Context(), Options{URL: url, Name: "events-close-test"}, slog.New(logs), m)
		if err != nil {
			t.Fatal(err)
		}
		testwait.For(t, 10*time.Second, "connected", func() bool { return testutil.ToFloat64(m.Connected) == 1 })
		if err := end.do(nc); err != nil {
			t.Fatalf("%s: %v", end.name, err)
		}
		// The closed callback comes after the disconnect callback, in order.
		testwait.For(t, 10*time.Second, "closed", func() bool { return nc.IsClosed() && testutil.ToFloat64(m.Connected) == 0 })
		if got := logs.count(logUnavailable); got != 0 {
			t.Errorf("%s: %d outage log lines, want none", end.name, got)
		}
		if got := testutil.ToFloat64(m.Outages); got != 0 {
			t.Errorf("%s: outages = %v, want 0", end.name, got)
		}
	}
}

func TestConnectRejectsBadOptions(t *testing.T) {
	t.Parallel()
	for _, o := range []Options{
		{},
		{URL: "nats://127.0.0.1:1", TLSCertFile: "c.pem"},
		{URL: "nats://127.0.0.1:1", NKeySeedFile: "/nonexistent/seed.nk"},
	} {
		if nc, err := Connect(t.Context(), o, nil, nil); err == nil {
			nc.Close()
			t.Errorf("Connect(%+v) succeeded", o)
		}
	}
}

func TestEnsureLifecycleStreamIsIdempotentAndRefusesCollisions(t *testing.T) {
	t.Parallel()
	nc := natstest.Connect(t, natstest.URL(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	base := natstest.Prefix(t)
	p1, p2 := base+".x", base+"_x" // distinct prefixes, one stream name
	for range 2 {
		st, err := EnsureLifecycleStream(t.Context(), js, p1)
		if err != nil {
			t.Fatalf("ensure: %v", err)
		}
		info := st.CachedInfo()
		if info.Config.MaxAge != LifecycleMaxAge || info.Config.Duplicates != LifecycleDuplicateWindow {
			t.Fatalf("config = %+v", info.Config)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, _ := NewSubjects(p1)
		_ = js.DeleteStream(ctx, s.LifecycleStream())
	})
	if _, err := EnsureLifecycleStream(t.Context(), js, p2); !errors.Is(err, ErrStreamConflict) {
		t.Fatalf("colliding prefix = %v, want ErrStreamConflict", err)
	}
	if _, err := EnsureLifecycleStream(t.Context(), js, "bad prefix"); !errors.Is(err, ErrInvalidPrefix) {
		t.Fatalf("bad prefix = %v", err)
	}
}
