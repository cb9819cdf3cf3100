package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/testio"
)

// TestJWKSURLUnreachableRefusesStart: in jwt mode with MIGHTYETL_JWT_JWKS_URL
// the intake fetches the keys before anything else starts; a URL that does
// not answer stops it with status 2 and one line naming the mode and the
// JWKS URL, before the database (a closed port here) is tried.
func TestJWKSURLUnreachableRefusesStart(t *testing.T) {
	env := map[string]string{
		"MIGHTYETL_AUTH_MODE":          "jwt",
		"MIGHTYETL_JWT_ISSUER":         "https://issuer.test",
		"MIGHTYETL_JWT_AUDIENCE":       "mightyetl",
		"MIGHTYETL_JWT_JWKS_URL":       "http://127.0.0.1:" + testio.ClosedPort(t) + "/jwks.json",
		"MIGHTYETL_PRINCIPAL_HASH_KEY": "0123456789abcdef0123456789abcdef",
		"DATABASE_URL":                 "postgres://postgres@127.0.0.1:1/mightyetl?connect_timeout=1",
	}
	var stderr bytes.Buffer
	code := run(nil, func(k string) string { return env[k] }, &stderr)
	out := strings.TrimRight(stderr.String(), "\n")
	if code != 2 || strings.Contains(out, "\n") || !strings.Contains(out, "MIGHTYETL_AUTH_MODE=jwt") ||
		!strings.Contains(out, "JWKS URL: unreachable") || strings.Contains(out, "intake: database") {
		t.Fatalf("exit %d, want 2 with one line naming jwt mode and the unreachable JWKS URL; stderr:\n%s", code, out)
	}
}
