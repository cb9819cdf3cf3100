package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/testio"
)

// redactLeakMarker is part of every password and token configured below.
const redactLeakMarker = "s3cr3t"

// TestStartupOutputHidesDatabaseAndNATSSecrets is issue 13 item 1 for the
// intake: with a password in every accepted DATABASE_URL form (and a token
// or password in NATS_URL), the "setting" lines logged at start-up and the
// error printed when the real connection attempt fails (closed port,
// unparseable settings) show host, port, user and database but no secret.
func TestStartupOutputHidesDatabaseAndNATSSecrets(t *testing.T) {
	port := testio.ClosedPort(t)
	kv := "host=127.0.0.1 port=" + port + " user=postgres dbname=mightyetl sslmode=disable"
	u := "postgres://postgres@127.0.0.1:" + port + "/mightyetl?sslmode=disable"
	cases := []struct{ name, db, nats string }{
		{"url userinfo", "postgres://postgres:s3cr3t@127.0.0.1:" + port + "/mightyetl?sslmode=disable", "nats://s3cr3t@127.0.0.1:4222"},
		{"url query password", u + "&password=s3cr3t", "nats://alice:s3cr3t@127.0.0.1:4222"},
		{"url query sslpassword", u + "&sslpassword=s3cr3t", "nats://127.0.0.1:4222, nats://s3cr3t@127.0.0.1:4223"},
		{"keyword/value unquoted", kv + " password=s3cr3t", "nats://s3cr3t@127.0.0.1:4222"},
		{"keyword/value quoted with a space", kv + " password='my s3cr3t'", "nats://s3cr3t@127.0.0.1:4222"},
		{"keyword/value quoted with an escaped quote", kv + ` password='it\'s s3cr3t'`, "nats://s3cr3t@127.0.0.1:4222"},
		{"keyword/value spaces around =", kv + " password = s3cr3t", "nats://s3cr3t@127.0.0.1:4222"},
		{"keyword/value sslpassword", kv + " sslpassword=s3cr3t", "nats://s3cr3t@127.0.0.1:4222"},
		{"unparseable keyword/value", "host=127.0.0.1 port=abc user=postgres password = s3cr3t", "nats://s3cr3t@127.0.0.1:4222"},
		{"unparseable url", "postgres://postgres:s3cr3t@127.0.0.1:notaport/mightyetl", "nats://s3cr3t@127.0.0.1:4222"},
	}
	t.Setenv("PGPASSWORD", redactLeakMarker+"-env")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{"DATABASE_URL": c.db, "NATS_URL": c.nats}
			var stderr bytes.Buffer
			code := run(nil, func(k string) string { return env[k] }, &stderr)
			out := stderr.String()
			if code != 1 {
				t.Fatalf("exit %d, want 1; output:\n%s", code, out)
			}
			if strings.Contains(out, redactLeakMarker) {
				t.Errorf("output shows a secret:\n%s", out)
			}
			settings := map[string]string{}
			for _, line := range strings.Split(out, "\n") {
				var s struct{ Msg, Name, Value string }
				if json.Unmarshal([]byte(line), &s) == nil && s.Msg == "setting" {
					settings[s.Name] = s.Value
				}
			}
			if db := settings["DATABASE_URL"]; db != "(unparseable)" && !strings.Contains(db, "port="+port) {
				t.Errorf("DATABASE_URL logged as %q, want host and port", db)
			}
			if !strings.Contains(settings["NATS_URL"], "127.0.0.1:4222") {
				t.Errorf("NATS_URL logged as %q, want its hosts", settings["NATS_URL"])
			}
			if !strings.Contains(out, "intake: database ") {
				t.Errorf("no database error line in:\n%s", out)
			}
		})
	}
}
