package main

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestReadRawResponseFramings(t *testing.T) {
	cases := []struct {
		name, in string
		status   int
		closing  bool
		rest     string // what must be left unread
		wantErr  bool
	}{
		{name: "content-length", in: "HTTP/1.1 202 Accepted\r\nContent-Length: 5\r\n\r\nhelloNEXT", status: 202, rest: "NEXT"},
		{name: "chunked with trailer", in: "HTTP/1.1 400 Bad Request\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nT: v\r\n\r\nNEXT", status: 400, rest: "NEXT"},
		{name: "connection close", in: "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\nNEXT", status: 503, closing: true, rest: "NEXT"},
		{name: "unframed body runs to the end", in: "HTTP/1.0 200 OK\r\n\r\nall of it", status: 200, closing: true},
		{name: "not HTTP", in: "SSH-2.0\r\n\r\n", wantErr: true},
		{name: "bad length", in: "HTTP/1.1 202 Accepted\r\nContent-Length: -1\r\n\r\n", wantErr: true},
		{name: "truncated", in: "HTTP/1.1 202 Accepted\r\nContent-Length: 9\r\n\r\nabc", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := bufio.NewReader(strings.NewReader(tc.in))
			status, closing, err := readRawResponse(r)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("got status %d and no error", status)
				}
				return
			}
			if err != nil || status != tc.status || closing != tc.closing {
				t.Fatalf("got (%d, %v, %v), want (%d, %v, nil)", status, closing, err, tc.status, tc.closing)
			}
			rest, _ := r.ReadString(0)
			if rest != tc.rest {
				t.Fatalf("left %q unread, want %q", rest, tc.rest)
			}
		})
	}
}

func TestRawRequestCounterMakesDistinctKeys(t *testing.T) {
	req := newRawRequest("127.0.0.1:1", "/api/etl/jobs", "Basic x", "run", 7, []byte(intakeBody))
	seen := map[string]bool{}
	for _, n := range []uint64{0, 1, 9, 10, 12345678901234} {
		req.setCounter(n)
		hr, err := http.ReadRequest(bufio.NewReader(strings.NewReader(string(req.buf))))
		if err != nil {
			t.Fatalf("counter %d: the prepared request does not parse: %v", n, err)
		}
		key := hr.Header.Get("Idempotency-Key")
		if seen[key] || !strings.HasPrefix(key, "bench-key-run-7-") || hr.Header.Get("Authorization") != "Basic x" ||
			hr.ContentLength != int64(len(intakeBody)) || hr.Method != http.MethodPost || hr.URL.Path != "/api/etl/jobs" {
			t.Fatalf("counter %d: request %+v with key %q (seen %v)", n, hr, key, seen[key])
		}
		seen[key] = true
	}
}

// TestRawPostLoadAgainstNetHTTPServer runs the raw client against Go's
// server: every request must arrive well formed with a distinct key, and
// what the server answered is what the load reports (including a
// connection the server closes).
func TestRawPostLoadAgainstNetHTTPServer(t *testing.T) {
	var mu sync.Mutex
	keys := map[string]bool{}
	var served int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		served++
		key := r.Header.Get("Idempotency-Key")
		if r.Method != http.MethodPost || r.URL.Path != "/api/etl/jobs" || keys[key] || r.Header.Get("Authorization") == "" {
			w.WriteHeader(http.StatusTeapot)
			return
		}
		keys[key] = true
		if served%7 == 0 {
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"jobId":"x"}`))
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	if _, _, err := net.SplitHostPort(addr); err != nil {
		t.Fatal(err)
	}
	load := rawPostLoad(context.Background(), addr, "/api/etl/jobs", []byte(intakeBody), 300*time.Millisecond,
		func(c int) string { return "Bench p" })
	mu.Lock()
	defer mu.Unlock()
	if load.accepted == 0 || load.failures[http.StatusTeapot] != 0 {
		t.Fatalf("accepted %d, failures %v", load.accepted, load.failures)
	}
	if got := load.accepted + load.failures[http.StatusServiceUnavailable]; got > served || got < served-intakeConcurrency {
		t.Fatalf("load saw %d answers, the server answered %d", got, served)
	}
	if len(load.lat) != load.accepted {
		t.Fatalf("%d latencies for %d accepted", len(load.lat), load.accepted)
	}
}
