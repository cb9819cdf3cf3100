package main

import (
	"bytes"
	"net"
	"strings"
	"testing"
)

// TestDenyModeRefusesNATSRequests: MIGHTYETL_AUTH_MODE=deny with the NATS
// request consumer enabled is a rejected configuration (exit 2, one line
// naming both settings), decided before any connection is tried. The
// database URL points at a closed port, so a binary that accepted the
// configuration would fail later with status 1 instead.
func TestDenyModeRefusesNATSRequests(t *testing.T) {
	cases := map[string]map[string]string{
		"deny, no key": {
			"MIGHTYETL_AUTH_MODE":             "deny",
			"MIGHTYETL_NATS_REQUESTS_ENABLED": "true",
		},
		"deny with a key": {
			"MIGHTYETL_AUTH_MODE":             "deny",
			"MIGHTYETL_NATS_REQUESTS_ENABLED": "true",
			"MIGHTYETL_PRINCIPAL_HASH_KEY":    "0123456789abcdef0123456789abcdef",
		},
		"default mode": {
			"MIGHTYETL_NATS_REQUESTS_ENABLED": "true",
		},
	}
	for name, env := range cases {
		t.Run(name, func(t *testing.T) {
			env["NATS_URL"] = "nats://127.0.0.1:1"
			env["DATABASE_URL"] = "postgres://postgres@127.0.0.1:1/mightyetl?connect_timeout=1"
			var stderr bytes.Buffer
			code := run(nil, func(k string) string { return env[k] }, &stderr)
			out := strings.TrimRight(stderr.String(), "\n")
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, out)
			}
			if strings.Contains(out, "\n") || !strings.Contains(out, "MIGHTYETL_AUTH_MODE=deny") || !strings.Contains(out, "MIGHTYETL_NATS_REQUESTS_ENABLED") {
				t.Fatalf("want one line naming both settings, got:\n%s", out)
			}
		})
	}
}

// TestPrincipalHashKeyRequiredWhenIntakeOpen: an open HTTP mode without a
// principal hash key is refused with one line naming the key.
func TestPrincipalHashKeyRequiredWhenIntakeOpen(t *testing.T) {
	env := map[string]string{
		"MIGHTYETL_AUTH_MODE":              "basic",
		"MIGHTYETL_BASIC_CREDENTIALS_FILE": "/nonexistent",
		"DATABASE_URL":                     "postgres://postgres@127.0.0.1:1/mightyetl?connect_timeout=1",
	}
	var stderr bytes.Buffer
	if code := run(nil, func(k string) string { return env[k] }, &stderr); code != 2 || !strings.Contains(stderr.String(), "MIGHTYETL_PRINCIPAL_HASH_KEY") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}

// TestTakenHTTPPortFailsFirstNamingTheSetting: with its HTTP port taken the
// intake exits 1 with one line naming the address and MIGHTYETL_HTTP_ADDR,
// before it tries the database (whose URL points at a closed port).
func TestTakenHTTPPortFailsFirstNamingTheSetting(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	env := map[string]string{
		"MIGHTYETL_HTTP_ADDR": held.Addr().String(),
		"DATABASE_URL":        "postgres://postgres@127.0.0.1:1/mightyetl?connect_timeout=1",
	}
	var stderr bytes.Buffer
	code := run(nil, func(k string) string { return env[k] }, &stderr)
	want := "intake: listen " + held.Addr().String() + " (MIGHTYETL_HTTP_ADDR / --http-addr): address already in use\n"
	if code != 1 || !strings.HasSuffix(stderr.String(), want) || strings.Contains(stderr.String(), "intake: database") {
		t.Fatalf("exit %d, stderr:\n%s\nwant exit 1 ending with %q and no database error", code, stderr.String(), want)
	}
}
