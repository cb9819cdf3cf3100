package pg_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/testio"
)

// leakMarker is part of every password in databaseForms.
const leakMarker = "s3cr3t"

// databaseForms returns every accepted way to give a password in
// DATABASE_URL, for a server at 127.0.0.1:port and database mightyetl.
func databaseForms(port string) []struct{ name, url string } {
	return []struct{ name, url string }{
		{"url userinfo", "postgres://postgres:s3cr3t@127.0.0.1:" + port + "/mightyetl?sslmode=disable"},
		{"url userinfo percent-encoded", "postgresql://postgres:p%40ss%3As3cr3t@127.0.0.1:" + port + "/mightyetl?sslmode=disable"},
		{"url query password", "postgres://postgres@127.0.0.1:" + port + "/mightyetl?sslmode=disable&password=s3cr3t"},
		{"url query sslpassword", "postgres://postgres@127.0.0.1:" + port + "/mightyetl?sslmode=disable&sslpassword=s3cr3t"},
		{"keyword/value unquoted", "host=127.0.0.1 port=" + port + " user=postgres dbname=mightyetl sslmode=disable password=s3cr3t"},
		{"keyword/value quoted with a space", "host=127.0.0.1 port=" + port + " user=postgres dbname=mightyetl sslmode=disable password='my s3cr3t'"},
		{"keyword/value quoted with an escaped quote", `host=127.0.0.1 port=` + port + ` user=postgres dbname=mightyetl sslmode=disable password='it\'s s3cr3t'`},
		{"keyword/value spaces around =", "host=127.0.0.1 port=" + port + " user=postgres dbname=mightyetl sslmode=disable password = s3cr3t"},
		{"keyword/value sslpassword", "host=127.0.0.1 port=" + port + " user=postgres dbname=mightyetl sslmode=disable sslpassword=s3cr3t"},
	}
}

// unparseableForms hold a password but do not parse; pgconn's own error
// text only redacts some such strings.
var unparseableForms = []struct{ name, url string }{
	{"url with a bad port", "postgres://postgres:s3cr3t@127.0.0.1:notaport/mightyetl"},
	{"keyword/value with a bad port", "host=127.0.0.1 port=abc user=postgres password = s3cr3t"},
	{"keyword/value with an unterminated quote", "host=127.0.0.1 user=postgres password='s3cr3t"},
}

// TestRedactURLHidesEveryPasswordForm is issue 13 item 1 for start-up
// errors: RedactURL shows host, port, user and database of every accepted
// form and no password; an unparseable value is a fixed placeholder.
func TestRedactURLHidesEveryPasswordForm(t *testing.T) {
	for _, f := range databaseForms("5432") {
		got := pg.RedactURL(f.url)
		if strings.Contains(got, leakMarker) {
			t.Errorf("%s: RedactURL leaks the password: %q", f.name, got)
		}
		for _, part := range []string{"127.0.0.1", "5432", "user=postgres", "database=mightyetl"} {
			if !strings.Contains(got, part) {
				t.Errorf("%s: RedactURL = %q, want it to show %q", f.name, got, part)
			}
		}
	}
	for _, f := range unparseableForms {
		if got := pg.RedactURL(f.url); got != "(unparseable)" {
			t.Errorf("%s: RedactURL = %q, want (unparseable)", f.name, got)
		}
	}
}

// TestFailedConnectionMessagesHideThePassword makes real connection attempts
// (to a closed port, and with unparseable settings) and checks the line a
// binary prints at start-up: RedactURL plus RedactError of NewPool's and
// EnsureDatabase's errors.
func TestFailedConnectionMessagesHideThePassword(t *testing.T) {
	t.Setenv("PGCONNECT_TIMEOUT", "")
	forms := append(databaseForms(testio.ClosedPort(t)), unparseableForms...)
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			pool, err := pg.NewPool(ctx, f.url, pg.PoolOptions{})
			if err == nil {
				pool.Close()
				t.Fatal("connected to a closed port")
			}
			line := fmt.Sprintf("intake: database %s: %s", pg.RedactURL(f.url), pg.RedactError(err, f.url))
			if strings.Contains(line, leakMarker) {
				t.Errorf("printed error leaks the password: %s", line)
			}
			if !strings.Contains(line, "connect") && !strings.Contains(line, "parse") {
				t.Errorf("printed error says too little: %s", line)
			}
			err = pg.EnsureDatabase(ctx, f.url, nil)
			if err == nil {
				t.Fatal("EnsureDatabase succeeded on a closed port")
			}
			if msg := pg.RedactError(err, f.url); strings.Contains(msg, leakMarker) {
				t.Errorf("EnsureDatabase error leaks the password: %s", msg)
			}
		})
	}
}
