package app

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/natstest"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

// oneUser authenticates every request as one principal.
type oneUser string

func (u oneUser) Authenticate(*http.Request) (string, error) { return string(u), nil }
func (oneUser) Challenge() string                            { return `Basic realm="test"` }

// The intake side of the schema-compatibility contract (issue 30): an
// intake started against a schema that needs a newer binary refuses HTTP
// submissions with 503 etl_schema_incompatible and Retry-After (GETs are
// served) and leaves a NATS request in the stream; once the schema admits
// its level again (seen through the gate's check hook, not a sleep), the
// same submission is accepted and the NATS request becomes a job.
func TestIntakeRefusesSubmissionsWhileTheSchemaIsIncompatible(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	next := pg.MaxSchemaVersion + 1
	pgtest.SetFutureSchema(t, pool, next, pg.BinaryCompatLevel+1)

	cfg := testIntakeConfig(url)
	cfg.PrincipalHashKey = "0123456789abcdef0123456789abcdef-test"
	cfg.NATS = config.NATS{URL: natstest.URL(t), SubjectPrefix: natstest.Prefix(t), RequestsEnabled: true,
		OutboxPollInterval: time.Second, OutboxBatchSize: 100}
	checks := make(chan bool, 4096)
	in, err := NewIntake(cfg, openTestPools(t, cfg), IntakeOptions{
		Authenticator:       oneUser("gate-user"),
		Name:                "app-schemagate-test",
		SchemaCheckInterval: 20 * time.Millisecond,
		OnSchemaCheck: func(ok bool) {
			select {
			case checks <- ok:
			default:
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := in.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		http.DefaultClient.CloseIdleConnections()
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := in.Stop(sctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	awaitCheck := func(want bool, what string) {
		t.Helper()
		deadline := time.NewTimer(30 * time.Second)
		defer deadline.Stop()
		for {
			select {
			case v := <-checks:
				if v == want {
					return
				}
			case <-deadline.C:
				t.Fatalf("timed out waiting for a schema check answering %t (%s)", want, what)
			}
		}
	}
	if in.SchemaGate.Compatible() {
		t.Fatal("gate compatible after Start against a schema that needs a newer binary")
	}
	base := "http://" + in.Server.Addr()
	const body, key = `[{"id":"gate-1","name":"a"}]`, "key-schema-gate-0001"

	status, hdr, code := post(t, base+"/api/etl/jobs", key, body)
	if status != 503 || code != codes.SchemaIncompatible || hdr.Get("Retry-After") != "10" {
		t.Fatalf("submit while incompatible: %d %q Retry-After %q, want 503 %s Retry-After 10", status, code, hdr.Get("Retry-After"), codes.SchemaIncompatible)
	}
	if got := get(t, base+"/api/etl/jobs"); got != 200 {
		t.Fatalf("GET /api/etl/jobs while incompatible: %d, want 200", got)
	}

	// A NATS request published while incompatible. The request stream is
	// created by the consumer's set-up, which runs whatever the verdict:
	// publish once it exists.
	subjects, err := events.NewSubjects(cfg.NATS.SubjectPrefix)
	if err != nil {
		t.Fatal(err)
	}
	subject, err := subjects.Requests("nats-user")
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(natstest.Connect(t, cfg.NATS.URL))
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(subject)
	msg.Data = []byte(`[{"id":"gate-2","name":"b"}]`)
	msg.Header.Set(events.IdempotencyKeyHeader, "key-schema-gate-0002")
	// The stream may still be being created: publish until it is stored.
	testwait.For(t, 30*time.Second, "the request published to its stream", func() bool {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := js.PublishMsg(pctx, msg)
		return err == nil
	})
	// Two full checks after the publish, each answering incompatible: the
	// consumer stayed paused through them.
	awaitCheck(false, "first check after the publish")
	awaitCheck(false, "second check after the publish")
	if n := countJobs(t, pool); n != 0 {
		t.Fatalf("%d jobs while the schema was incompatible, want 0", n)
	}
	info, err := js.Consumer(ctx, subjects.RequestsStream(), events.DefaultRequestDurable)
	if err != nil {
		t.Fatalf("request consumer: %v", err)
	}
	if ci := info.CachedInfo(); ci.Delivered.Consumer != 0 || ci.NumPending != 1 {
		t.Fatalf("request consumer while incompatible: delivered %d, pending %d; want 0 and 1", ci.Delivered.Consumer, ci.NumPending)
	}

	pgtest.SetFutureSchema(t, pool, next, pg.BinaryCompatLevel)
	awaitCheck(true, "schema admits this binary again")
	if status, _, code := post(t, base+"/api/etl/jobs", key, body); status != 202 {
		t.Fatalf("submit once compatible: %d %q, want 202", status, code)
	}
	testwait.For(t, 30*time.Second, "the NATS request to become a job once compatible", func() bool {
		return countJobs(t, pool) == 2
	})
}

// post submits body with key and returns the status, headers and, for a
// problem, its errorCode.
func post(t *testing.T, url, key, body string) (int, http.Header, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hr, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Idempotency-Key", key)
	res, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var p struct {
		ErrorCode string `json:"errorCode"`
	}
	_ = json.Unmarshal(b, &p)
	return res.StatusCode, res.Header, p.ErrorCode
}

func countJobs(t *testing.T, db pg.DBTX) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM etl_job_records`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
