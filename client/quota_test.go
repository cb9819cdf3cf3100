package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// quotaServer answers its first refusals requests with the service's 429
// etl_owner_quota_exceeded (Retry-After 1) and then 202, recording each
// request's key and body.
type quotaServer struct {
	refusals int
	mu       sync.Mutex
	keys     []string
	bodies   [][]byte
}

func (s *quotaServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.keys = append(s.keys, r.Header.Get("Idempotency-Key"))
	s.bodies = append(s.bodies, body)
	n := len(s.keys)
	s.mu.Unlock()
	if n <= s.refusals {
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"type":"urn:mightyetl:problem:etl-owner-quota-exceeded","title":"Owner quota exceeded","status":429,` +
			`"detail":"retry later","instance":"/api/etl/jobs","errorCode":"etl_owner_quota_exceeded"}`))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/api/etl/jobs/00000000-0000-0000-0000-000000000001")
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write([]byte(`{"jobRecordId":"00000000-0000-0000-0000-000000000001","jobStatus":"PENDING","statusUrl":"/api/etl/jobs/00000000-0000-0000-0000-000000000001"}`))
}

// A submission refused for the owner's quota (429 etl_owner_quota_exceeded
// with Retry-After) is retried by the client with the same key and body
// until it is admitted; with retries off, the error carries the code, the
// Retry-After and Transient.
func TestOwnerQuotaRefusalIsRetried(t *testing.T) {
	srv := &quotaServer{refusals: 2}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	// MaxDelay caps the server's Retry-After, so the test does not wait a
	// second per retry.
	c, err := New(ts.URL, WithRetry(RetryPolicy{MaxAttempts: 5, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	records := []byte(`[{"id":"a1"}]`)
	sub, err := c.Submit(context.Background(), records, "quota-retry-key-0001")
	if err != nil {
		t.Fatal(err)
	}
	if sub.JobID != "00000000-0000-0000-0000-000000000001" {
		t.Fatalf("submission %+v", sub)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if len(srv.keys) != 3 {
		t.Fatalf("%d requests, want 3 (two refusals, one admission)", len(srv.keys))
	}
	for i := range srv.keys {
		if srv.keys[i] != "quota-retry-key-0001" || !bytes.Equal(srv.bodies[i], records) {
			t.Fatalf("request %d: key %q body %q; want the same key and body each time", i, srv.keys[i], srv.bodies[i])
		}
	}

	once := &quotaServer{refusals: 1}
	ts2 := httptest.NewServer(once)
	defer ts2.Close()
	c2, err := New(ts2.URL, WithRetry(RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c2.Submit(context.Background(), records, "quota-retry-key-0002")
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeOwnerQuotaExceeded || e.Status != http.StatusTooManyRequests ||
		e.RetryAfter != time.Second || !e.Transient() {
		t.Fatalf("error %#v, want 429 %s, RetryAfter 1s, transient", err, CodeOwnerQuotaExceeded)
	}
	// A NATS rejection with the code (no status) is transient too.
	if !(&Error{Code: CodeOwnerQuotaExceeded}).Transient() {
		t.Fatal("a NATS quota rejection is not transient")
	}
}
