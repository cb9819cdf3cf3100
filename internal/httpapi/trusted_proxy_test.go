package httpapi

import (
	"encoding/base64"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/auth"
)

// Over real HTTP (the test server's peer is 127.0.0.1): with the peer a
// trusted proxy, the Basic failure limit is per client named by
// X-Forwarded-For, so one client's failures do not lock out another behind
// the same proxy; without trust, a client rotating a spoofed
// X-Forwarded-For is limited as the one peer it is.
func TestBasicModeTrustedProxyHeader(t *testing.T) {
	t.Parallel()
	line, err := auth.CredentialLine("alice", []byte("correct horse"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(path, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	newEnvWith := func(trusted []netip.Prefix) *env {
		b, err := auth.NewBasic(auth.BasicOptions{CredentialsFile: path, FailureBurst: 2, FailureRefill: time.Hour, TrustedProxies: trusted})
		if err != nil {
			t.Fatal(err)
		}
		return newEnv(t, withAuth(b))
	}
	basicFrom := func(client, user, pass string) req {
		return req{Method: "GET", Path: "/api/etl/jobs", Header: map[string]string{
			"Authorization":   "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass)),
			"X-Forwarded-For": client,
		}}
	}

	t.Run("trusted peer", func(t *testing.T) {
		e := newEnvWith([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})
		for range 2 {
			checkProblem(t, e.do(basicFrom("203.0.113.1", "mallory", "guess")), "/api/etl/jobs", 401, "etl_authentication_required")
		}
		checkProblem(t, e.do(basicFrom("203.0.113.1", "mallory", "guess")), "/api/etl/jobs", 429, "etl_authentication_rate_limited")
		// A client-written entry left of the proxy's does not escape it.
		checkProblem(t, e.do(basicFrom("198.51.100.9, 203.0.113.1", "mallory", "guess")), "/api/etl/jobs", 429, "etl_authentication_rate_limited")
		// Another client behind the same proxy is not locked out.
		if res := e.do(basicFrom("203.0.113.2", "alice", "correct horse")); res.Status != 200 {
			t.Errorf("other client behind the trusted proxy: status %d, want 200", res.Status)
		}
	})
	t.Run("untrusted peer", func(t *testing.T) {
		e := newEnvWith(nil)
		for i := range 2 {
			checkProblem(t, e.do(basicFrom(fmt.Sprint("203.0.113.", 10+i), "mallory", "guess")), "/api/etl/jobs", 401, "etl_authentication_required")
		}
		checkProblem(t, e.do(basicFrom("203.0.113.99", "mallory", "guess")), "/api/etl/jobs", 429, "etl_authentication_rate_limited")
	})
}
