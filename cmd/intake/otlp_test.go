package main_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/binarytest"
	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/natstest"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testio"
	"github.com/mightyetl/mightyetl/internal/testwait"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// TestMain removes the binaries built for the tests once they ran.
func TestMain(m *testing.M) { binarytest.Main(m) }

// receivedSpan is one span an OTLP/HTTP export delivered.
type receivedSpan struct {
	service, name, traceID string
	links                  []string // trace ids
}

// otlpReceiver is an OTLP/HTTP trace receiver in the test process: it
// decodes every ExportTraceServiceRequest and keeps its spans.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []receivedSpan
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, "gzip", http.StatusBadRequest)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(body)
	var msg coltracepb.ExportTraceServiceRequest
	if err != nil || proto.Unmarshal(raw, &msg) != nil {
		http.Error(w, "decode", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range msg.GetResourceSpans() {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				rec := receivedSpan{service: service, name: s.GetName(), traceID: hex.EncodeToString(s.GetTraceId())}
				for _, l := range s.GetLinks() {
					rec.links = append(rec.links, hex.EncodeToString(l.GetTraceId()))
				}
				r.spans = append(r.spans, rec)
			}
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// has reports whether a span of service named name is in traceID, or (link)
// links to it.
func (r *otlpReceiver) has(service, name, traceID string, link bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.spans {
		if s.service != service || s.name != name {
			continue
		}
		if !link && s.traceID == traceID {
			return true
		}
		for _, l := range s.links {
			if link && l == traceID {
				return true
			}
		}
	}
	return false
}

// TestOTLPTraceFromHTTPAndNATSSubmitToWorker starts the real intake and
// worker binaries exporting to an OTLP/HTTP receiver in this process. A job
// submitted over HTTP with a known traceparent yields intake spans in that
// trace and a worker execution span linked to it; a job submitted as a NATS
// request with a traceparent header does the same.
func TestOTLPTraceFromHTTPAndNATSSubmitToWorker(t *testing.T) {
	t.Parallel()
	_, dbURL := pgtest.NewDatabase(t)
	natsURL, prefix := natstest.URL(t), natstest.Prefix(t)
	recv := &otlpReceiver{}
	collector := httptest.NewServer(recv)
	t.Cleanup(collector.Close)

	bins := binarytest.Binaries(t, "intake", "worker")
	dir := t.TempDir()
	const principal, password = "tracer", "otlp-test-password"
	line, err := auth.CredentialLine(principal, []byte(password))
	if err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(dir, "credentials")
	if err := os.WriteFile(creds, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	intakeAddr := "127.0.0.1:" + testio.ClosedPort(t)
	common := []string{"DATABASE_URL=" + dbURL, "NATS_URL=" + natsURL, "MIGHTYETL_NATS_SUBJECT_PREFIX=" + prefix,
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + collector.URL, "OTEL_BSP_SCHEDULE_DELAY=100"}
	// Each binary sees none of the test's mightyETL, database, NATS or
	// OpenTelemetry settings, only these; it is killed when the test ends.
	start := func(name string, env ...string) *binarytest.Process {
		return binarytest.Spawn(t, binarytest.Options{Path: bins[name],
			Env: binarytest.Env(binarytest.Isolated, append(append([]string(nil), common...), env...)...)})
	}
	intake := start("intake", "MIGHTYETL_HTTP_ADDR="+intakeAddr, "MIGHTYETL_AUTH_MODE=basic",
		"MIGHTYETL_BASIC_CREDENTIALS_FILE="+creds, "MIGHTYETL_PRINCIPAL_HASH_KEY=0123456789abcdef0123456789abcdef",
		"MIGHTYETL_NATS_REQUESTS_ENABLED=true")
	start("worker", "MIGHTYETL_METRICS_ADDR=127.0.0.1:0", "MIGHTYETL_WORKER_POLL_INTERVAL=100ms")
	client := &http.Client{Timeout: 5 * time.Second}
	if err := intake.WaitReady(context.Background(), 30*time.Second, "GET /readyz 200", binarytest.HTTPOK(client, "http://"+intakeAddr+"/readyz")); err != nil {
		t.Fatal(err)
	}

	// HTTP, with a known traceparent.
	const httpTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, err := http.NewRequest(http.MethodPost, "http://"+intakeAddr+"/api/etl/jobs",
		bytes.NewReader([]byte(`[{"id":"h1","name":"otlp"}]`)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "otlp-http-key-000001")
	req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(principal+":"+password)))
	req.Header.Set("traceparent", "00-"+httpTrace+"-00f067aa0ba902b7-01")
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("submit: status %d", res.StatusCode)
	}

	// NATS, with a traceparent message header.
	const natsTrace = "0af7651916cd43dd8448eb211c80319c"
	nc := natstest.Connect(t, natsURL)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "request stream", func() bool {
		_, err := js.Stream(context.Background(), strings.ToUpper(prefix)+"_REQUESTS")
		return err == nil
	})
	msg := nats.NewMsg(prefix + ".requests." + principal)
	msg.Data = []byte(`[{"id":"n1","name":"otlp"}]`)
	msg.Header.Set(events.IdempotencyKeyHeader, "otlp-nats-key-000001")
	msg.Header.Set("traceparent", "00-"+natsTrace+"-b7ad6b7169203331-01")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}

	testwait.For(t, 60*time.Second, "intake and worker spans of both traces", func() bool {
		return recv.has("mightyetl-intake", "POST /api/etl/jobs", httpTrace, false) &&
			recv.has("mightyetl-intake", "intake.submit", httpTrace, false) &&
			recv.has("mightyetl-worker", "worker.execute", httpTrace, true) &&
			recv.has("mightyetl-intake", "nats.request.consume", natsTrace, false) &&
			recv.has("mightyetl-intake", "intake.submit", natsTrace, false) &&
			recv.has("mightyetl-worker", "worker.execute", natsTrace, true)
	})
}
