package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/client"
)

// TestScheduleOptionsAreSentAsHeaders: WithPriority and WithNotBefore send
// Mightyetl-Priority and Mightyetl-Not-Before (UTC, RFC 3339 with
// nanoseconds) on Submit, SubmitDiagnostic and Replay, nothing without
// them; the answer's priority and notBefore are decoded; List sends the
// priority filter; a priority outside 1..4 fails before anything is sent.
func TestScheduleOptionsAreSentAsHeaders(t *testing.T) {
	var mu sync.Mutex
	var seen []http.Header
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		queries = append(queries, r.URL.RawQuery)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet {
			_, _ = w.Write([]byte(`{"jobs":[{"jobRecordId":"j1","jobStatus":"PENDING","attemptCount":0,"priority":1,` +
				`"notBefore":"2030-01-02T03:04:05.000000Z","createdAt":"2030-01-01T00:00:00.000000Z","updatedAt":"2030-01-01T00:00:00.000000Z"}]}`))
			return
		}
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"jobRecordId":"j1","jobStatus":"PENDING","statusUrl":"/api/etl/jobs/j1","priority":1,"notBefore":"2030-01-02T03:04:05.000000Z"}`))
	}))
	defer srv.Close()
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	at := time.Date(2030, 1, 2, 4, 4, 5, 123456789, time.FixedZone("CET", 3600))
	opts := []client.SubmitOption{client.WithPriority(1), client.WithNotBefore(at)}
	sub, err := c.Submit(ctx, []byte(`[]`), "", opts...)
	if err != nil {
		t.Fatal(err)
	}
	want := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	if sub.Priority != 1 || sub.NotBefore == nil || !sub.NotBefore.Equal(want) {
		t.Errorf("submission %+v", sub)
	}
	if _, err := c.SubmitDiagnostic(ctx, client.DiagnosticRequest{}, "", opts...); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Replay(ctx, "j0", []byte(`[]`), "", opts...); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(ctx, []byte(`[]`), ""); err != nil {
		t.Fatal(err)
	}
	page, err := c.List(ctx, client.ListOptions{Priority: 3})
	if err != nil || len(page.Jobs) != 1 || page.Jobs[0].Priority != 1 || page.Jobs[0].NotBefore == nil {
		t.Fatalf("list %+v %v", page, err)
	}
	for _, p := range []int{-1, 5} {
		_, err := c.Submit(ctx, []byte(`[]`), "", client.WithPriority(p))
		var pe *client.Error
		if !errors.As(err, &pe) || pe.Code != client.CodeInvalidPriority || pe.Status != 0 {
			t.Errorf("priority %d: %v", p, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 5 {
		t.Fatalf("%d requests sent, want 5 (nothing for the refused priorities)", len(seen))
	}
	for i := range 3 {
		if seen[i].Get(client.PriorityHeader) != "1" || seen[i].Get(client.NotBeforeHeader) != "2030-01-02T03:04:05.123456789Z" {
			t.Errorf("request %d headers %v", i, seen[i])
		}
	}
	if seen[3].Get(client.PriorityHeader) != "" || seen[3].Get(client.NotBeforeHeader) != "" {
		t.Errorf("a submit without options sent %v", seen[3])
	}
	if queries[4] != "priority=3" {
		t.Errorf("list query %q", queries[4])
	}
}

// TestProducerSendsTheScheduleHeaders: Publish puts WithPriority and
// WithNotBefore in the message's headers and refuses a priority outside
// 1..4 without publishing.
func TestProducerSendsTheScheduleHeaders(t *testing.T) {
	nc := natsConn(t, "carol")
	prefix := testPrefix()
	stream := requestStream(t, nc, prefix)
	ctx := testCtx(t)
	p, err := client.NewProducer(nc, "carol", client.ProducerOptions{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	pub, err := p.Publish(ctx, []byte(`[{"id":"a1"}]`), "", client.WithPriority(4), client.WithNotBefore(at))
	if err != nil {
		t.Fatal(err)
	}
	m, err := stream.GetMsg(ctx, pub.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get(client.PriorityHeader) != "4" || m.Header.Get(client.NotBeforeHeader) != "2030-01-02T03:04:05Z" {
		t.Fatalf("headers %v", m.Header)
	}
	_, err = p.Publish(ctx, []byte(`[{"id":"a2"}]`), "", client.WithPriority(9))
	var pe *client.Error
	if !errors.As(err, &pe) || pe.Code != client.CodeInvalidPriority {
		t.Fatalf("priority 9: %v", err)
	}
	if info, err := stream.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Fatalf("stream %+v %v, want the one request", info, err)
	}
}
