package deploy_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/binarytest"
	"github.com/mightyetl/mightyetl/internal/natstest"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testio"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

// TestMain removes the binaries built for the tests once they ran.
func TestMain(m *testing.M) { binarytest.Main(m) }

// TestQueriedMetricsAreExported builds and starts the real intake and
// worker binaries on a fresh database and a NATS subject prefix, runs one
// job through them (HTTP submit, outbox wake-up, claim, execution, finish)
// and one rejected submission, so that labelled histograms and counters have
// series, then scrapes both /metrics and fails naming every metric that the
// dashboard, the alert rules or the Kubernetes autoscalers query and
// neither process exports.
func TestQueriedMetricsAreExported(t *testing.T) {
	qs := append(append(dashboardQueries(t), ruleQueries(t)...), autoscalingQueries(t)...)
	pool, dbURL := pgtest.NewDatabase(t)
	natsURL, prefix := natstest.URL(t), natstest.Prefix(t)
	bins := binarytest.Binaries(t, "intake", "worker")

	dir := t.TempDir()
	password := "dashboard-test-password"
	line, err := auth.CredentialLine("dashboard", []byte(password))
	if err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(dir, "credentials")
	if err := os.WriteFile(creds, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	intakeURL := "http://127.0.0.1:" + testio.ClosedPort(t)
	workerURL := "http://127.0.0.1:" + testio.ClosedPort(t)
	common := []string{"DATABASE_URL=" + dbURL, "NATS_URL=" + natsURL, "MIGHTYETL_NATS_SUBJECT_PREFIX=" + prefix}
	intake := startProcess(t, bins["intake"], append(common,
		"MIGHTYETL_HTTP_ADDR="+strings.TrimPrefix(intakeURL, "http://"),
		"MIGHTYETL_AUTH_MODE=basic",
		"MIGHTYETL_BASIC_CREDENTIALS_FILE="+creds,
		"MIGHTYETL_PRINCIPAL_HASH_KEY=0123456789abcdef0123456789abcdef",
		"MIGHTYETL_NATS_REQUESTS_ENABLED=true",
	)...)
	worker := startProcess(t, bins["worker"], append(common,
		"MIGHTYETL_METRICS_ADDR="+strings.TrimPrefix(workerURL, "http://"),
		"MIGHTYETL_WORKER_POLL_INTERVAL=100ms",
	)...)
	for _, p := range []struct {
		proc *binarytest.Process
		url  string
	}{{intake, intakeURL}, {worker, workerURL}} {
		if err := p.proc.WaitReady(context.Background(), time.Minute, "GET /readyz 200", binarytest.HTTPOK(httpClient, p.url+"/readyz")); err != nil {
			t.Fatal(err)
		}
	}

	authz := "Basic " + base64.StdEncoding.EncodeToString([]byte("dashboard:"+password))
	if code := submit(t, intakeURL, authz, "dashboard-ok", `[{"id":"a1","name":"jane","email":"Jane@Example.COM","amount":"999.9"}]`); code != http.StatusAccepted {
		t.Fatalf("submit: status %d, want 202", code)
	}
	if code := submit(t, intakeURL, authz, "dashboard-bad", `[{"id":""}]`); code/100 != 4 {
		t.Fatalf("invalid submit: status %d, want 4xx", code)
	}
	testwait.For(t, time.Minute, "the job to succeed", func() bool {
		if err := worker.Alive(); err != nil {
			t.Fatal(err)
		}
		var n int
		_ = pool.QueryRow(context.Background(), `SELECT count(*) FROM etl_job_records WHERE job_status='SUCCEEDED'`).Scan(&n)
		return n == 1
	})

	// The worker counts an outcome after its finish commits, and the relay
	// publishes the lifecycle events after that: wait until nothing is
	// missing, then report what still is. Both expositions a Prometheus
	// may negotiate are checked: the classic text format and OpenMetrics
	// (which carries the exemplars).
	for _, accept := range []string{"text/plain;version=0.0.4", "application/openmetrics-text;version=1.0.0"} {
		var missing map[string][]string
		deadline := time.Now().Add(15 * time.Second)
		for {
			fams := map[string]string{}
			for _, u := range []string{intakeURL, workerURL} {
				code, body := get(u+"/metrics", accept)
				if code != http.StatusOK {
					t.Fatalf("GET %s/metrics (Accept: %s): status %d", u, accept, code)
				}
				for name, typ := range families(t, body) {
					fams[name] = typ
				}
			}
			missing = missingNames(fams, qs)
			if len(missing) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		var names []string
		for n := range missing {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			t.Errorf("%s is queried but exported by neither the intake nor the worker (Accept: %s); used in:\n\t%s", n, accept, strings.Join(missing[n], "\n\t"))
		}
	}
}

// startProcess runs bin with the test's environment minus every mightyETL,
// database, NATS and OpenTelemetry setting, plus env; the process is killed
// when the test ends and its output is logged on failure.
func startProcess(t *testing.T, bin string, env ...string) *binarytest.Process {
	t.Helper()
	return binarytest.Spawn(t, binarytest.Options{Path: bin, Env: binarytest.Env(binarytest.Isolated, env...)})
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

// get returns the status and body of GET url with an optional Accept
// header; status 0 when the request failed.
func get(url string, accept ...string) (int, []byte) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, nil
	}
	for _, a := range accept {
		req.Header.Add("Accept", a)
	}
	res, err := httpClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

func submit(t *testing.T, base, authz, key, body string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/api/etl/jobs", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", authz)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", fmt.Sprintf("%s-%d", key, time.Now().UnixNano()))
	res, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode
}
