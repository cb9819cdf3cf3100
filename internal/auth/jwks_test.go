package auth

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/mightyetl/mightyetl/internal/testwait"
)

// jwksServer is an identity provider's JWKS endpoint in the test process:
// it serves the keys it is given, or a status, and counts its fetches.
type jwksServer struct {
	*httptest.Server
	mu     sync.Mutex
	keys   []map[string]any
	status int           // 0: 200 with the keys
	gate   chan struct{} // non-nil: each fetch waits until it is closed
	hits   atomic.Int64
}

func newJWKSServer(t *testing.T, keys ...map[string]any) *jwksServer {
	s := &jwksServer{keys: keys}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.mu.Lock()
		keys, status, gate := s.keys, s.status, s.gate
		s.mu.Unlock()
		if gate != nil {
			<-gate
		}
		if status != 0 {
			w.WriteHeader(status)
			return
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": keys})
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) set(status int, keys ...map[string]any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.keys = status, keys
}

// longClaims are validClaims that stay valid while a test clock advances
// past refresh intervals.
func longClaims() jwt.MapClaims { return with(validClaims(), "exp", testNow.Add(48*time.Hour).Unix()) }

// newURLJWT returns a JWT on srv's URL with a test clock starting at
// testNow and a log of its own.
func newURLJWT(t *testing.T, srv *jwksServer, interval time.Duration) (*JWT, *testClock, *bytes.Buffer) {
	t.Helper()
	clock := &testClock{now: testNow}
	var log bytes.Buffer
	j, err := NewJWT(JWTOptions{Issuer: testIssuer, Audience: testAudience, JWKSURL: srv.URL + "/jwks.json",
		RefreshInterval: interval, Now: clock.Now, Logger: slog.New(slog.NewJSONHandler(&syncWriter{w: &log}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(j.source.background.Wait)
	return j, clock, &log
}

// syncWriter serialises writes to w (the background fetch logs too).
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func mustBearer(t *testing.T, j *JWT, token, what string) {
	t.Helper()
	if p, err := bearer(j, token); err != nil || p != "alice" {
		t.Fatalf("%s: %q, %v; want alice", what, p, err)
	}
}

func mustRejectBearer(t *testing.T, j *JWT, token, what string) {
	t.Helper()
	if p, err := bearer(j, token); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("%s: %q, %v; want ErrUnauthenticated", what, p, err)
	}
}

// Key rotation at the identity provider: a token of key A is accepted;
// the provider switches to key B; a token naming kid B is accepted after
// the keys are fetched again for its unknown kid; key A, gone from the
// provider's set, is no longer accepted.
func TestJWKSURLKeyRotation(t *testing.T) {
	k := loadTestKeys()
	srv := newJWKSServer(t, rsaJWK("key-a", &k.rsa.PublicKey))
	j, clock, log := newURLJWT(t, srv, 0)
	tokenA := sign(t, jwt.SigningMethodRS256, "key-a", longClaims(), k.rsa)
	tokenB := sign(t, jwt.SigningMethodES256, "key-b", longClaims(), k.ec)
	mustBearer(t, j, tokenA, "token of key A")
	if n := srv.hits.Load(); n != 1 {
		t.Fatalf("%d fetches after start and one token, want 1", n)
	}

	srv.set(0, ecJWK("key-b", &k.ec.PublicKey))
	clock.Advance(JWKSMinFetchGap)
	mustBearer(t, j, tokenB, "token of key B after rotation")
	if n := srv.hits.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2 (start, unknown kid)", n)
	}
	mustRejectBearer(t, j, tokenA, "token of key A after the provider dropped it")
	if n := srv.hits.Load(); n != 2 {
		t.Errorf("%d fetches, want 2: kid A is unknown now, but a fetch started less than the gap ago", n)
	}
	if !strings.Contains(log.String(), "jwks keys changed") {
		t.Errorf("no log line for the changed key set:\n%s", log)
	}
}

// A flood of tokens naming unknown kids makes at most one fetch per
// JWKSMinFetchGap, however many arrive at once.
func TestJWKSURLUnknownKidFloodFetchesOncePerGap(t *testing.T) {
	k := loadTestKeys()
	srv := newJWKSServer(t, rsaJWK("key-a", &k.rsa.PublicKey))
	j, clock, _ := newURLJWT(t, srv, 0)
	flood := func(n int) {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				tok := sign(t, jwt.SigningMethodRS256, fmt.Sprintf("forged-%d", i), longClaims(), k.rsaOther)
				if _, err := bearer(j, tok); !errors.Is(err, ErrUnauthenticated) {
					t.Errorf("unknown kid: %v, want ErrUnauthenticated", err)
				}
			})
		}
		wg.Wait()
	}
	flood(50) // within the gap of the first fetch
	if n := srv.hits.Load(); n != 1 {
		t.Fatalf("%d fetches after a flood within the first gap, want 1", n)
	}
	clock.Advance(JWKSMinFetchGap)
	flood(50)
	if n := srv.hits.Load(); n != 2 {
		t.Fatalf("%d fetches after a flood in the next gap, want 2", n)
	}
	clock.Advance(JWKSMinFetchGap - time.Millisecond)
	flood(20)
	if n := srv.hits.Load(); n != 2 {
		t.Fatalf("%d fetches within the gap, want 2", n)
	}
	clock.Advance(time.Millisecond)
	flood(20)
	if n := srv.hits.Load(); n != 3 {
		t.Fatalf("%d fetches once the gap passed, want 3", n)
	}
}

// With the provider down (closed, or answering 500 or garbage) the keys in
// hand stay in use, past the refresh interval too; each failure is logged
// without the URL, and tried again at most once per gap.
func TestJWKSURLServerDownKeepsCachedKeys(t *testing.T) {
	k := loadTestKeys()
	for _, down := range []string{"500", "garbage", "closed"} {
		t.Run(down, func(t *testing.T) {
			srv := newJWKSServer(t, rsaJWK("key-a", &k.rsa.PublicKey))
			j, clock, log := newURLJWT(t, srv, time.Minute)
			tokenA := sign(t, jwt.SigningMethodRS256, "key-a", longClaims(), k.rsa)
			switch down {
			case "500":
				srv.set(http.StatusInternalServerError)
			case "garbage":
				srv.set(0, map[string]any{"kty": "RSA", "kid": "bad", "n": "AQAB", "e": "AQAB"})
			case "closed":
				srv.Close()
			}
			clock.Advance(2 * time.Minute) // past the refresh interval
			mustBearer(t, j, tokenA, "token of key A, provider down, keys stale")
			j.source.background.Wait()
			mustBearer(t, j, tokenA, "token of key A after the failed refresh")
			tokenB := sign(t, jwt.SigningMethodES256, "key-b", longClaims(), k.ec)
			mustRejectBearer(t, j, tokenB, "unknown kid while the provider is down")
			if got := j.source.fetches.Load(); got != 2 {
				t.Errorf("%d fetches, want 2 (start, one refresh within the gap)", got)
			}
			clock.Advance(JWKSMinFetchGap)
			mustRejectBearer(t, j, tokenB, "unknown kid while the provider is down, next gap")
			j.source.background.Wait()
			mustBearer(t, j, tokenA, "token of key A, provider still down")
			if got := j.source.fetches.Load(); got != 3 {
				t.Errorf("%d fetches, want 3", got)
			}
			out := log.String()
			if !strings.Contains(out, "jwks refresh failed") || !strings.Contains(out, `"error_class":"jwks_`) {
				t.Errorf("no refresh failure logged:\n%s", out)
			}
			if strings.Contains(out, srv.URL) || strings.Contains(out, "127.0.0.1") {
				t.Errorf("log names the URL:\n%s", out)
			}
		})
	}
}

// Keys older than the refresh interval are fetched again in the
// background: a key the provider dropped stops being accepted within one
// interval (plus the fetch), with no unknown kid involved; before the
// interval nothing is fetched.
func TestJWKSURLRefreshInterval(t *testing.T) {
	k := loadTestKeys()
	srv := newJWKSServer(t, rsaJWK("key-a", &k.rsa.PublicKey), ecJWK("key-b", &k.ec.PublicKey))
	j, clock, _ := newURLJWT(t, srv, time.Minute)
	tokenA := sign(t, jwt.SigningMethodRS256, "key-a", longClaims(), k.rsa)
	tokenB := sign(t, jwt.SigningMethodES256, "key-b", longClaims(), k.ec)
	srv.set(0, ecJWK("key-b", &k.ec.PublicKey)) // the provider drops key A
	clock.Advance(time.Minute - time.Second)
	mustBearer(t, j, tokenA, "token of key A within the interval")
	j.source.background.Wait()
	if n := srv.hits.Load(); n != 1 {
		t.Fatalf("%d fetches within the interval, want 1", n)
	}
	clock.Advance(time.Second)
	// The request that notices the stale keys starts the fetch and goes
	// on with the keys in hand (key B is in both sets).
	mustBearer(t, j, tokenB, "token of key B as the interval ends")
	j.source.background.Wait()
	if n := srv.hits.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2", n)
	}
	mustRejectBearer(t, j, tokenA, "token of key A after the refresh")
}

// A request waiting on a fetch in progress for an unknown kid gives up
// when its context ends; the fetch goes on for the others.
func TestJWKSURLWaitBoundedByRequest(t *testing.T) {
	k := loadTestKeys()
	srv := newJWKSServer(t, rsaJWK("key-a", &k.rsa.PublicKey))
	j, clock, _ := newURLJWT(t, srv, 0)
	gate := make(chan struct{})
	srv.mu.Lock()
	srv.gate = gate
	srv.keys = append(srv.keys, edJWK("key-c", k.ed.Public().(ed25519.PublicKey)))
	srv.mu.Unlock()
	clock.Advance(JWKSMinFetchGap)
	tokenC := sign(t, jwt.SigningMethodEdDSA, "key-c", longClaims(), k.ed)
	first := make(chan error, 1)
	go func() { _, err := bearer(j, tokenC); first <- err }()
	testwait.For(t, hangGuard, "fetch for the unknown kid started", func() bool { return srv.hits.Load() >= 2 })
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/api/etl/jobs", nil)
	r.Header.Set("Authorization", "Bearer "+tokenC)
	if _, err := j.Authenticate(r); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("request whose context ended while waiting: %v, want ErrUnauthenticated", err)
	}
	close(gate)
	if err, ok := receive(t, first, "request that started the fetch"); ok && err != nil {
		t.Errorf("request that started the fetch: %v", err)
	}
	mustBearer(t, j, tokenC, "token of key C after the fetch")
}

func TestNewJWTWithURLErrors(t *testing.T) {
	k := loadTestKeys()
	srv := newJWKSServer(t, rsaJWK("key-a", &k.rsa.PublicKey))
	redirect := httptest.NewServer(http.RedirectHandler(srv.URL, http.StatusFound))
	t.Cleanup(redirect.Close)
	notFound := newJWKSServer(t)
	notFound.set(http.StatusNotFound)
	huge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"keys":[` + strings.Repeat(" ", maxJWKSResponseBytes) + `]}`))
	}))
	t.Cleanup(huge.Close)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	base := JWTOptions{Issuer: testIssuer, Audience: testAudience}
	for name, tc := range map[string]struct {
		opts func(o *JWTOptions)
		want string
	}{
		"file and URL":             {func(o *JWTOptions) { o.JWKSFile, o.JWKSURL = "/jwks.json", srv.URL }, "both"},
		"neither":                  {func(*JWTOptions) {}, "not set"},
		"interval below the gap":   {func(o *JWTOptions) { o.JWKSURL, o.RefreshInterval = srv.URL, time.Second }, "refresh interval"},
		"http to another host":     {func(o *JWTOptions) { o.JWKSURL = "http://idp.example/jwks.json" }, "https"},
		"unreachable":              {func(o *JWTOptions) { o.JWKSURL = closed.URL }, "unreachable"},
		"404":                      {func(o *JWTOptions) { o.JWKSURL = notFound.URL }, "status"},
		"redirect is not followed": {func(o *JWTOptions) { o.JWKSURL = redirect.URL }, "status"},
		"larger than 1 MiB":        {func(o *JWTOptions) { o.JWKSURL = huge.URL }, "bytes"},
	} {
		o := base
		tc.opts(&o)
		if _, err := NewJWT(o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: NewJWT error %v, want one containing %q", name, err, tc.want)
		}
	}
}

func TestCheckJWKSURL(t *testing.T) {
	for in, ok := range map[string]bool{
		"https://idp.example/.well-known/jwks.json": true,
		"https://idp.example:8443/keys?tenant=a":    true,
		"http://127.0.0.1:8080/jwks":                true,
		"http://localhost/jwks":                     true,
		"http://[::1]:9000/jwks":                    true,
		"http://idp.example/jwks":                   false,
		"http://10.0.0.1/jwks":                      false,
		"https://user:pass@idp.example/jwks":        false,
		"https://idp.example/jwks#frag":             false,
		"ftp://idp.example/jwks":                    false,
		"/jwks.json":                                false,
		"idp.example/jwks":                          false,
		"":                                          false,
	} {
		if err := CheckJWKSURL(in); (err == nil) != ok {
			t.Errorf("CheckJWKSURL(%q) = %v, want ok %v", in, err, ok)
		}
	}
}
