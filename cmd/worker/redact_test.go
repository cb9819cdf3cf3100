package main_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/mightyetl/mightyetl/internal/binarytest"
	"github.com/mightyetl/mightyetl/internal/natstest"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testio"
)

// leakMarker is part of every password and token the tests below configure.
const leakMarker = "s3cr3t"

// runWorkerUntil runs the worker binary with env until its output contains
// want or it exits, and returns the output (stdout and stderr) and the exit
// code (-1 when it was still running and got killed).
func runWorkerUntil(t *testing.T, env []string, want string) (string, int) {
	t.Helper()
	p := binarytest.Spawn(t, binarytest.Options{Path: binarytest.Binary(t, "worker"), Env: append(os.Environ(), env...)})
	deadline := time.After(time.Minute)
	for {
		select {
		case <-p.Done():
			if ee, ok := p.ExitErr().(*exec.ExitError); ok {
				return p.Output(), ee.ExitCode()
			}
			return p.Output(), 0
		case <-deadline:
			t.Fatalf("worker neither printed %q nor exited; output:\n%s", want, p.Output())
		case <-time.After(20 * time.Millisecond):
			if want != "" && strings.Contains(p.Output(), want) {
				p.Kill()
				return p.Output(), -1
			}
		}
	}
}

// databaseForms writes the same settings in every accepted form that can
// carry a password.
func databaseForms(host, port, user, password, database string) map[string]string {
	kv := "host=" + host + " port=" + port + " user=" + user + " dbname=" + database + " sslmode=disable"
	u := "postgres://" + url.PathEscape(user) + "@" + net.JoinHostPort(host, port) + "/" + database + "?sslmode=disable"
	return map[string]string{
		"url userinfo":              "postgres://" + url.UserPassword(user, password).String() + "@" + net.JoinHostPort(host, port) + "/" + database + "?sslmode=disable",
		"url query password":        u + "&password=" + url.QueryEscape(password),
		"url query sslpassword":     u + "&password=" + url.QueryEscape(password) + "&sslpassword=" + leakMarker + "-ssl",
		"keyword/value unquoted":    kv + " password=" + password,
		"keyword/value quoted":      kv + " password='" + password + "'",
		"keyword/value spaced":      kv + " password = " + password,
		"keyword/value sslpassword": kv + " password=" + password + " sslpassword='" + leakMarker + " ssl'",
	}
}

// natsForms puts a token or a password into natsURL in every accepted form.
func natsForms(natsURL string) map[string]string {
	withUser := func(u *url.Userinfo) string {
		p, err := url.Parse(natsURL)
		if err != nil {
			panic(err)
		}
		p.User = u
		return p.String()
	}
	return map[string]string{
		"nats token":    withUser(url.User(leakMarker + "-token")),
		"nats password": withUser(url.UserPassword("alice", leakMarker+"-pass")),
		"nats list":     "nats://127.0.0.1:1, " + withUser(url.User(leakMarker+"-token")) + " ,tls://bob:" + leakMarker + "@127.0.0.1:2/",
	}
}

// TestStartupOutputHidesDatabaseAndNATSSecrets is issue 13 item 1 against
// the real binary: with a password in every accepted DATABASE_URL form and a
// token or password in every NATS_URL form, neither the "worker
// configuration" line of a worker that starts, nor the error of one whose
// database connection fails (closed port, unparseable settings), shows them.
func TestStartupOutputHidesDatabaseAndNATSSecrets(t *testing.T) {
	_, dbURL := pgtest.NewDatabase(t)
	cfg, err := pgconn.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	// A role of our own with a known password, so the forms connect under
	// trust and password authentication alike.
	role, password := "mightyetl_redact_"+randomHex(t), leakMarker+"-"+randomHex(t)
	admin, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	ident := pgx.Identifier{role}.Sanitize()
	for _, stmt := range []string{
		"CREATE ROLE " + ident + " LOGIN PASSWORD '" + password + "'",
		"GRANT USAGE ON SCHEMA public TO " + ident,
		"GRANT ALL ON ALL TABLES IN SCHEMA public TO " + ident,
		"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO " + ident,
	} {
		if _, err := admin.Exec(context.Background(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		ctx := context.Background()
		c, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP OWNED BY "+ident)
		if _, err := c.Exec(ctx, "DROP ROLE "+ident); err != nil {
			t.Error(err)
		}
	})
	nats := natsForms(natstest.URL(t))
	natsNames := []string{"nats token", "nats password", "nats list"}
	check := func(t *testing.T, out string) {
		t.Helper()
		if strings.Contains(out, leakMarker) {
			t.Errorf("output shows a secret:\n%s", out)
		}
	}

	t.Run("starts", func(t *testing.T) {
		i := 0
		for name, dsn := range databaseForms(cfg.Host, strconv.Itoa(int(cfg.Port)), role, password, cfg.Database) {
			natsName := natsNames[i%len(natsNames)]
			i++
			t.Run(name+" with "+natsName, func(t *testing.T) {
				out, code := runWorkerUntil(t, []string{"DATABASE_URL=" + dsn, "NATS_URL=" + nats[natsName],
					"MIGHTYETL_METRICS_ADDR=127.0.0.1:0", "PGPASSWORD=" + leakMarker + "-env"}, `"msg":"worker configuration"`)
				if code != -1 {
					t.Fatalf("worker exited with %d before its configuration line:\n%s", code, out)
				}
				check(t, out)
				line := configurationLine(t, out)
				if v := line["DATABASE_URL"].Value; !strings.Contains(v, "user="+role) || !strings.Contains(v, "database="+cfg.Database) {
					t.Errorf("DATABASE_URL shown as %q, want user and database", v)
				}
				if v := line["NATS_URL"].Value; !strings.Contains(v, "127.0.0.1") {
					t.Errorf("NATS_URL shown as %q, want its hosts", v)
				}
			})
		}
	})

	t.Run("connection fails", func(t *testing.T) {
		forms := databaseForms("127.0.0.1", testio.ClosedPort(t), "postgres", password, "mightyetl")
		forms["unparseable keyword/value"] = "host=127.0.0.1 port=abc user=postgres password = " + password
		forms["unparseable url"] = "postgres://postgres:" + password + "@127.0.0.1:notaport/mightyetl"
		for name, dsn := range forms {
			t.Run(name, func(t *testing.T) {
				out, code := runWorkerUntil(t, []string{"DATABASE_URL=" + dsn, "NATS_URL=" + nats["nats token"],
					"MIGHTYETL_METRICS_ADDR=127.0.0.1:0"}, "")
				if code != 1 || !strings.HasPrefix(out, "worker: ") {
					t.Fatalf("exit %d, want 1 with a worker: line; output:\n%s", code, out)
				}
				check(t, out)
			})
		}
	})
}

type provenanceValue struct{ Value, Source string }

// configurationLine decodes the "worker configuration" log line.
func configurationLine(t *testing.T, out string) map[string]provenanceValue {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if !strings.Contains(l, `"msg":"worker configuration"`) {
			continue
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("configuration line %q: %v", l, err)
		}
		res := map[string]provenanceValue{}
		for k, raw := range m {
			var v provenanceValue
			if json.Unmarshal(raw, &v) == nil {
				res[k] = v
			}
		}
		return res
	}
	t.Fatalf("no configuration line in:\n%s", out)
	return nil
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestLeaseDurationAloneStarts is issue 13 item 9 against the real binary:
// MIGHTYETL_LEASE_DURATION=10s alone starts a worker whose configuration line
// shows the derived renewal interval and safety margin.
func TestLeaseDurationAloneStarts(t *testing.T) {
	t.Parallel()
	_, dbURL := pgtest.NewDatabase(t)
	out, code := runWorkerUntil(t, []string{"DATABASE_URL=" + dbURL, "MIGHTYETL_METRICS_ADDR=127.0.0.1:0",
		"MIGHTYETL_LEASE_DURATION=10s"}, `"msg":"worker configuration"`)
	if code != -1 {
		t.Fatalf("worker exited with %d:\n%s", code, out)
	}
	line := configurationLine(t, out)
	want := map[string]provenanceValue{
		"MIGHTYETL_LEASE_DURATION":       {"10s", "env"},
		"MIGHTYETL_LEASE_RENEW_INTERVAL": {"3.333s", "derived"},
		"MIGHTYETL_LEASE_SAFETY_MARGIN":  {"1.666s", "derived"},
	}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("%s = %+v, want %+v", k, line[k], v)
		}
	}
}
