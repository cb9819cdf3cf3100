package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// recorder is a server that counts what reaches it.
type recorder struct {
	mu       sync.Mutex
	requests int
	auth     []string // Authorization headers received
	keys     []string // Idempotency-Key headers received
	bodies   int      // requests that carried a body
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.requests++
	if a := req.Header.Get("Authorization"); a != "" {
		r.auth = append(r.auth, a)
	}
	if k := req.Header.Get("Idempotency-Key"); k != "" {
		r.keys = append(r.keys, k)
	}
	if len(body) > 0 {
		r.bodies++
	}
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write([]byte(`{"id":"00000000-0000-0000-0000-000000000001","status":"PENDING"}`))
}

func (r *recorder) snapshot() (requests, bodies int, auth, keys []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests, r.bodies, append([]string(nil), r.auth...), append([]string(nil), r.keys...)
}

// redirector answers every request with status and a Location on target
// (same path), counting the requests it answered.
func redirector(status int, target func() string, count *int, mu *sync.Mutex) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		*count++
		mu.Unlock()
		http.Redirect(w, r, target()+r.URL.RequestURI(), status)
	})
}

// wantRedirectError checks that err is the client's typed refusal of a
// redirect: an *Error with CodeUnexpectedResponse, the 3xx status, and a
// message naming it.
func wantRedirectError(t *testing.T, err error, status int) {
	t.Helper()
	var p *Error
	if !errors.As(err, &p) {
		t.Fatalf("err %v, want an *Error", err)
	}
	if p.Code != CodeUnexpectedResponse || p.Status != status {
		t.Errorf("code %s status %d, want %s %d", p.Code, p.Status, CodeUnexpectedResponse, status)
	}
	if !errors.Is(err, &Error{Code: CodeUnexpectedResponse, Status: status}) {
		t.Errorf("errors.Is against {%s %d} is false", CodeUnexpectedResponse, status)
	}
	if msg := err.Error(); !strings.Contains(msg, http.StatusText(status)) || !strings.Contains(msg, "redirect") {
		t.Errorf("Error() %q does not name the redirect status", msg)
	}
}

// TestRedirectToAnotherHostSendsNothing: a 307 answer to a submission (which
// Go's client would follow with the same method, body and headers) is not
// followed: the other server receives no request at all, so neither the
// body nor the Idempotency-Key nor the credentials leave, and the call fails
// with the typed error without retrying.
func TestRedirectToAnotherHostSendsNothing(t *testing.T) {
	other := &recorder{}
	otherSrv := httptest.NewServer(other)
	defer otherSrv.Close()
	// "localhost" instead of 127.0.0.1: another host name, as a redirect to
	// a foreign host would be.
	otherURL := strings.Replace(otherSrv.URL, "127.0.0.1", "localhost", 1)

	var mu sync.Mutex
	answered := 0
	srv := httptest.NewServer(redirector(http.StatusTemporaryRedirect, func() string { return otherURL }, &answered, &mu))
	defer srv.Close()

	c, err := New(srv.URL, WithBasicAuth("alice", "s3cret-password"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Submit(context.Background(), []byte(`[{"id":"a"}]`), "redirect-test-key-0001")
	wantRedirectError(t, err, http.StatusTemporaryRedirect)

	if n, bodies, auth, keys := other.snapshot(); n != 0 || bodies != 0 || len(auth) != 0 || len(keys) != 0 {
		t.Errorf("the redirect target received %d requests (%d bodies, %d Authorization, %d Idempotency-Key); want none", n, bodies, len(auth), len(keys))
	}
	mu.Lock()
	defer mu.Unlock()
	if answered != 1 {
		t.Errorf("the service was asked %d times, want 1 (a redirect is not retried)", answered)
	}
}

// TestRedirectToSameHostOtherPortSendsNoCredentials: Go's client keeps
// Authorization on a redirect to the same host name on another port; the
// client does not follow, so the server on the other port never sees the
// credentials (nor any request).
func TestRedirectToSameHostOtherPortSendsNoCredentials(t *testing.T) {
	other := &recorder{}
	otherSrv := httptest.NewServer(other) // 127.0.0.1, another port
	defer otherSrv.Close()

	var mu sync.Mutex
	answered := 0
	srv := httptest.NewServer(redirector(http.StatusFound, func() string { return otherSrv.URL }, &answered, &mu))
	defer srv.Close()
	if hostOf(t, srv.URL) != hostOf(t, otherSrv.URL) {
		t.Fatalf("test servers on different hosts: %s, %s", srv.URL, otherSrv.URL)
	}

	c, err := New(srv.URL, WithBearerToken(StaticToken("secret-token")))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Get(context.Background(), "00000000-0000-0000-0000-000000000001")
	wantRedirectError(t, err, http.StatusFound)
	if n, _, auth, _ := other.snapshot(); n != 0 || len(auth) != 0 {
		t.Errorf("the other port received %d requests, %d with Authorization; want none", n, len(auth))
	}
}

// TestRedirectWithCallersHTTPClient: with WithHTTPClient the client refuses
// redirects too, from https to http on the same host, while the caller's
// *http.Client is left as it was (its CheckRedirect still nil, its
// transport still used: the TLS server's certificate is trusted only
// through it).
func TestRedirectWithCallersHTTPClient(t *testing.T) {
	other := &recorder{}
	otherSrv := httptest.NewServer(other) // plain http
	defer otherSrv.Close()

	var mu sync.Mutex
	answered := 0
	srv := httptest.NewTLSServer(redirector(http.StatusPermanentRedirect, func() string { return otherSrv.URL }, &answered, &mu))
	defer srv.Close()

	hc := srv.Client()
	transport := hc.Transport
	c, err := New(srv.URL, WithHTTPClient(hc), WithBasicAuth("alice", "s3cret-password"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Cancel(context.Background(), "00000000-0000-0000-0000-000000000001", "redirect-test-key-0002")
	wantRedirectError(t, err, http.StatusPermanentRedirect)
	if n, _, auth, keys := other.snapshot(); n != 0 || len(auth) != 0 || len(keys) != 0 {
		t.Errorf("the http server received %d requests (%d Authorization, %d Idempotency-Key); want none", n, len(auth), len(keys))
	}
	mu.Lock()
	if answered != 1 {
		t.Errorf("the TLS server answered %d requests, want 1 (through the caller's transport)", answered)
	}
	mu.Unlock()
	if hc.CheckRedirect != nil {
		t.Error("WithHTTPClient changed the caller's CheckRedirect")
	}
	if hc.Transport != transport {
		t.Error("WithHTTPClient changed the caller's Transport")
	}

	// The caller's client itself still follows redirects as the caller set
	// it up: the client's refusal is its own.
	res, err := hc.Get(srv.URL + "/anything")
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if n, _, _, _ := other.snapshot(); n != 1 {
		t.Errorf("the caller's own client made %d requests to the target, want 1 (it follows redirects)", n)
	}
}

// TestNotModifiedIsNotARedirectError: 304 is a 3xx the API does answer
// (a conditional Get); it stays a result, not an error.
func TestNotModifiedIsNotARedirectError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("If-None-Match") != `"v1"` {
			t.Errorf("If-None-Match %q", r.Header.Get("If-None-Match"))
		}
		w.WriteHeader(http.StatusNotModified)
	}))
	defer srv.Close()
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	j, changed, err := c.GetIfChanged(context.Background(), "00000000-0000-0000-0000-000000000001", `"v1"`)
	if err != nil || changed || j != nil {
		t.Fatalf("GetIfChanged: job %v changed %v err %v, want nil false nil", j, changed, err)
	}
}

func hostOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Hostname()
}
