package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// leakMarker is part of every secret in secretForms: no provenance value may
// contain it.
const leakMarker = "s3cr3t"

// secretForm is one accepted way to put a secret into DATABASE_URL or
// NATS_URL.
type secretForm struct {
	name  string
	env   string // DATABASE_URL or NATS_URL
	value string
	want  string // the exact provenance value; "" checks only show
	show  []string
}

func secretForms() []secretForm {
	db := []string{"127.0.0.1", "5432", "postgres", "mightyetl"}
	return []secretForm{
		{"url userinfo", "DATABASE_URL", "postgres://postgres:s3cr3t@127.0.0.1:5432/mightyetl?sslmode=disable",
			"host=127.0.0.1 port=5432 user=postgres database=mightyetl sslmode=disable", nil},
		{"url userinfo percent-encoded", "DATABASE_URL", "postgresql://postgres:p%40ss%3As3cr3t@127.0.0.1/mightyetl", "", db},
		{"url query password", "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/mightyetl?password=s3cr3t", "", db},
		{"url query sslpassword", "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/mightyetl?sslmode=require&sslpassword=s3cr3t",
			"host=127.0.0.1 port=5432 user=postgres database=mightyetl sslmode=require", nil},
		{"keyword/value unquoted", "DATABASE_URL", "host=127.0.0.1 user=postgres dbname=mightyetl password=s3cr3t",
			"host=127.0.0.1 port=5432 user=postgres database=mightyetl sslmode=prefer", nil},
		{"keyword/value quoted with a space", "DATABASE_URL", "host=127.0.0.1 user=postgres dbname=mightyetl password='my s3cr3t'", "", db},
		{"keyword/value quoted with an escaped quote", "DATABASE_URL", `host=127.0.0.1 user=postgres dbname=mightyetl password='it\'s s3cr3t'`, "", db},
		{"keyword/value spaces around =", "DATABASE_URL", "host=127.0.0.1 user=postgres dbname=mightyetl password = s3cr3t", "", db},
		{"keyword/value sslpassword", "DATABASE_URL", "host=127.0.0.1 user=postgres dbname=mightyetl sslmode=disable sslpassword=s3cr3t", "", db},
		{"keyword/value two hosts", "DATABASE_URL", "host=127.0.0.1,127.0.0.2 port=5432,5433 user=postgres dbname=mightyetl password=s3cr3t sslmode=disable",
			"host=127.0.0.1:5432,127.0.0.2:5433 user=postgres database=mightyetl sslmode=disable", nil},
		{"unparseable url", "DATABASE_URL", "postgres://postgres:s3cr3t@127.0.0.1:notaport/mightyetl", "(unparseable)", nil},
		{"unparseable keyword/value", "DATABASE_URL", "host=127.0.0.1 port=abc password = s3cr3t", "(unparseable)", nil},
		{"nats token", "NATS_URL", "nats://s3cr3t@127.0.0.1:4222", "nats://xxxxx@127.0.0.1:4222", nil},
		{"nats user and password", "NATS_URL", "nats://alice:s3cr3t@127.0.0.1:4222", "nats://alice:xxxxx@127.0.0.1:4222", nil},
		{"nats list", "NATS_URL", "nats://127.0.0.1:4222, tls://s3cr3t@10.0.0.2 ,ws://bob:s3cr3t@10.0.0.3/",
			"nats://127.0.0.1:4222,tls://xxxxx@10.0.0.2:4222,ws://bob:xxxxx@10.0.0.3:80", nil},
		{"nats query and fragment", "NATS_URL", "nats://127.0.0.1:4222/?token=s3cr3t#s3cr3t", "nats://127.0.0.1:4222", nil},
	}
}

// TestProvenanceHidesDatabaseAndNATSSecrets is issue 13 item 1: the
// start-up configuration log (Loader.Provenance) of both binaries shows the
// non-secret parts of every accepted DATABASE_URL and NATS_URL form and never
// a password, sslpassword or token.
func TestProvenanceHidesDatabaseAndNATSSecrets(t *testing.T) {
	for _, k := range []string{"PGHOST", "PGPORT", "PGUSER", "PGDATABASE", "PGSSLMODE", "PGSERVICE"} {
		t.Setenv(k, "")
	}
	t.Setenv("PGPASSWORD", "env-"+leakMarker) // pgconn reads PG* variables too
	t.Setenv("PGSSLPASSWORD", "env-"+leakMarker)
	for _, f := range secretForms() {
		t.Run(f.name, func(t *testing.T) {
			e := map[string]string{f.env: f.value, "MIGHTYETL_WORKER_ID": "worker-redaction-1"}
			_, wl, werr := LoadWorker(nil, env(e))
			_, il, ierr := LoadIntake(nil, env(e))
			for _, l := range []*Loader{wl, il} {
				if werr != nil || ierr != nil {
					if f.want == "(unparseable)" {
						continue // refused before any log; the refusal never echoes the value
					}
					t.Fatalf("load: %v / %v", werr, ierr)
				}
				var got string
				for _, s := range l.Provenance() {
					if strings.Contains(s.Value, leakMarker) {
						t.Errorf("%s leaks a secret: %q", s.Name, s.Value)
					}
					if s.Name == f.env {
						got = s.Value
					}
				}
				if f.want != "" && got != f.want {
					t.Errorf("%s = %q, want %q", f.env, got, f.want)
				}
				for _, part := range f.show {
					if !strings.Contains(got, part) {
						t.Errorf("%s = %q, want it to show %q", f.env, got, part)
					}
				}
			}
			for _, err := range []error{werr, ierr} {
				if err != nil && strings.Contains(err.Error(), leakMarker) {
					t.Errorf("refusal leaks a secret: %v", err)
				}
			}
		})
	}
}

// TestRedactErrorHidesDatabaseAndNATSSecrets: a start-up error that quotes
// a configured password or token (no driver error is known to, so this is
// the second line of defence) is printed without it.
func TestRedactErrorHidesDatabaseAndNATSSecrets(t *testing.T) {
	w := Worker{
		DatabaseURL: "host=127.0.0.1 user=postgres password='db s3cr3t'",
		NATS:        NATS{URL: "nats://tok-s3cr3t@127.0.0.1:4222, nats://alice:pw-s3cr3t@127.0.0.2"},
	}
	err := errors.New("connect: db s3cr3t / tok-s3cr3t / pw-s3cr3t")
	got := w.RedactError(fmt.Errorf("start: %w", err))
	if strings.Contains(got, leakMarker) || !strings.HasPrefix(got, "start: connect: ") {
		t.Fatalf("RedactError = %q", got)
	}
	if (Intake{}).RedactError(nil) != "" {
		t.Fatal("nil error must give an empty string")
	}
}
