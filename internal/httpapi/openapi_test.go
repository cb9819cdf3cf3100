package httpapi

import (
	"bytes"
	"context"
	"io"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// TestOpenAPIContract validates real responses of the running handler
// against docs/openapi.yaml (OpenAPI 3.1, validated by kin-openapi), for
// every route and a problem of every status the spec lists.
func TestOpenAPIContract(t *testing.T) {
	t.Parallel()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("spec invalid: %v", err)
	}
	doc.Servers = nil // match on paths only; the test server listens on a random port
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	// Every problem code the handler can produce is listed in the spec.
	codes := doc.Components.Schemas["Problem"].Value.Properties["errorCode"].Value.Enum
	listed := map[string]bool{}
	for _, c := range codes {
		listed[c.(string)] = true
	}
	var missing []string
	for code := range problemTable {
		if !listed[code] {
			missing = append(missing, code)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("spec lacks problem codes %v", missing)
	}

	e := newEnv(t)
	s, _ := e.submit("alice", "key-openapi-00000001", sampleBody)
	done := finishJob(t, e, "alice", "key-openapi-00000002", pg.StatusFailed)
	e.submit("alice", "key-openapi-00000003", sampleBody)
	var replayed submitted
	if res := e.do(req{Method: "POST", Path: "/api/etl/jobs/" + s.JobRecordID + "/replays", Principal: "alice", Key: "replay-openapi-0001", Body: sampleBody}); res.Status != 202 {
		t.Fatalf("replay: %d %s", res.Status, res.Body)
	} else {
		res.json(t, &replayed)
	}
	var page listResponse
	e.do(req{Method: "GET", Path: "/api/etl/jobs?limit=1", Principal: "alice"}).json(t, &page)
	etag := e.do(req{Method: "GET", Path: "/api/etl/jobs/" + s.JobRecordID, Principal: "alice"}).Header.Get("ETag")
	uploadCases := openAPIUploadCases(t, e)
	chunkedCases := openAPIChunkedCases(t, e)

	cases := []req{
		{Method: "POST", Path: "/api/etl/jobs", Principal: "alice", Key: "key-openapi-00000004", Body: sampleBody},
		{Method: "POST", Path: "/api/etl/jobs", Principal: "alice", Key: "key-openapi-00000004", Body: sampleBody},
		{Method: "POST", Path: "/api/etl/jobs", Principal: "alice", Key: "key-openapi-00000004", Body: "[]"},
		{Method: "POST", Path: "/api/etl/jobs", Principal: "alice", Key: "bad", Body: "[]"},
		{Method: "POST", Path: "/api/etl/jobs", Key: "key-openapi-00000005", Body: "[]"},
		{Method: "POST", Path: "/api/etl/jobs", Principal: "alice", Key: "key-openapi-00000005", Body: "[" + strings.Repeat(`{"id":"x"},`, 7000) + `{"id":"y"}]`},
		{Method: "GET", Path: "/api/etl/jobs", Principal: "alice"},
		{Method: "GET", Path: "/api/etl/jobs?limit=1", Principal: "alice"},
		{Method: "GET", Path: "/api/etl/jobs?limit=1&cursor=" + page.NextCursor, Principal: "alice"},
		{Method: "GET", Path: "/api/etl/jobs?limit=1&status=FAILED", Principal: "alice"},
		{Method: "GET", Path: "/api/etl/jobs?limit=500", Principal: "alice"},
		{Method: "GET", Path: "/api/etl/jobs/" + s.JobRecordID, Principal: "alice"},
		{Method: "GET", Path: "/api/etl/jobs/" + done, Principal: "alice"},
		{Method: "GET", Path: "/api/etl/jobs/" + s.JobRecordID, Principal: "alice", Header: map[string]string{"If-None-Match": etag}},
		{Method: "GET", Path: "/api/etl/jobs/" + s.JobRecordID, Principal: "bob"},
		{Method: "GET", Path: "/api/etl/jobs/" + replayed.JobRecordID, Principal: "alice"},
		{Method: "POST", Path: "/api/etl/jobs/" + s.JobRecordID + "/replays", Principal: "alice", Key: "replay-openapi-0002", Body: sampleBody},
		{Method: "POST", Path: "/api/etl/jobs/" + s.JobRecordID + "/replays", Principal: "alice", Key: "replay-openapi-0002", Body: sampleBody},
		{Method: "POST", Path: "/api/etl/jobs/" + s.JobRecordID + "/replays", Principal: "alice", Key: "replay-openapi-0003", Body: "[]"},
		{Method: "POST", Path: "/api/etl/jobs/" + s.JobRecordID + "/replays", Principal: "alice", Body: sampleBody},
		{Method: "POST", Path: "/api/etl/jobs/" + s.JobRecordID + "/replays", Principal: "bob", Key: "replay-openapi-0003", Body: sampleBody},
		{Method: "POST", Path: "/api/etl/jobs/" + done + "/replays", Principal: "alice", Key: "replay-openapi-0004", Body: sampleBody},
		{Method: "POST", Path: "/api/etl/jobs/" + s.JobRecordID + "/cancellation", Principal: "alice", Key: "cancel-openapi-00001"},
		{Method: "POST", Path: "/api/etl/jobs/" + s.JobRecordID + "/cancellation", Principal: "alice", Key: "cancel-openapi-00001"},
		{Method: "POST", Path: "/api/etl/jobs/" + s.JobRecordID + "/cancellation", Principal: "alice", Key: "cancel-openapi-00002"},
		{Method: "POST", Path: "/api/etl/jobs/" + done + "/cancellation", Principal: "alice", Key: "cancel-openapi-00002"},
		{Method: "POST", Path: "/api/etl/jobs/" + done + "/cancellation", Principal: "alice"},
		{Method: "POST", Path: "/api/etl/process", Principal: "alice", Body: sampleBody},
		{Method: "POST", Path: "/api/etl/process", Principal: "alice", Key: "sync-openapi-000001", Body: sampleBody},
		{Method: "POST", Path: "/api/etl/process", Principal: "alice", Key: "sync-openapi-000001", Body: "[]"},
		{Method: "POST", Path: "/api/etl/process", Principal: "alice", Body: `[{"id":""}]`},
		{Method: "POST", Path: "/api/etl/jobs", Principal: "alice", Key: "key-openapi-00000008", Body: `[{"id":"a"},{"id":"b","amount":"x"}]`},
		{Method: "POST", Path: "/api/etl/diagnostic-jobs", Principal: "alice", Key: "key-openapi-00000009", Body: `{"records":[{"id":"a"},{"id":" b"}]}`},
		{Method: "POST", Path: "/api/etl/process", Principal: "alice", Body: sampleBody, Header: map[string]string{"Content-Type": "text/plain"}},
		{Method: "POST", Path: "/api/etl/diagnostic-jobs", Principal: "alice", Key: "key-openapi-00000006", Body: `{"durationMillis":1}`},
		{Method: "POST", Path: "/api/etl/diagnostic-jobs", Principal: "alice", Key: "key-openapi-00000007", Body: `{"durationMillis":-1}`},
		{Method: "GET", Path: "/api/ops/overview", Principal: "operator"},
		{Method: "GET", Path: "/api/ops/overview", Principal: "alice"},
		{Method: "GET", Path: "/api/ops/overview"},
		{Method: "GET", Path: "/api/ops/jobs", Principal: "operator"},
		{Method: "GET", Path: "/api/ops/jobs?state=FAILED&limit=20", Principal: "operator"},
		{Method: "GET", Path: "/api/ops/jobs?state=PENDING", Principal: "operator"},
		{Method: "GET", Path: "/api/ops/jobs?state=BOGUS", Principal: "operator"},
		{Method: "GET", Path: "/api/ops/jobs?priority=2&state=PENDING", Principal: "operator"},
		{Method: "GET", Path: "/api/ops/jobs?priority=9", Principal: "operator"},
		{Method: "GET", Path: "/api/ops/jobs", Principal: "alice"},
		{Method: "GET", Path: "/api/ops/jobs/" + s.JobRecordID, Principal: "operator"},
		{Method: "GET", Path: "/api/ops/jobs/" + replayed.JobRecordID, Principal: "operator"},
		{Method: "GET", Path: "/api/ops/jobs/" + uuid.NewString(), Principal: "operator"},
		{Method: "GET", Path: "/api/ops/jobs/" + s.JobRecordID, Principal: "alice"},
		{Method: "POST", Path: "/api/ops/jobs/" + s.JobRecordID + "/replays", Principal: "operator", Key: "ops-replay-openapi-01", Body: sampleBody},
		{Method: "POST", Path: "/api/ops/jobs/" + s.JobRecordID + "/replays", Principal: "operator", Key: "ops-replay-openapi-01", Body: sampleBody},
		{Method: "POST", Path: "/api/ops/jobs/" + s.JobRecordID + "/replays", Principal: "operator", Key: "ops-replay-openapi-01", Body: "[]"},
		{Method: "POST", Path: "/api/ops/jobs/" + s.JobRecordID + "/replays", Principal: "operator", Key: "ops-replay-openapi-02", Body: "[]"},
		{Method: "POST", Path: "/api/ops/jobs/" + s.JobRecordID + "/replays", Principal: "operator", Body: sampleBody},
		{Method: "POST", Path: "/api/ops/jobs/" + done + "/replays", Principal: "operator", Key: "ops-replay-openapi-03", Body: sampleBody},
		{Method: "POST", Path: "/api/ops/jobs/" + uuid.NewString() + "/replays", Principal: "operator", Key: "ops-replay-openapi-04", Body: sampleBody},
		{Method: "POST", Path: "/api/ops/jobs/" + s.JobRecordID + "/replays", Principal: "alice", Key: "ops-replay-openapi-05", Body: sampleBody},
		{Method: "POST", Path: "/api/ops/jobs/" + s.JobRecordID + "/replays", Key: "ops-replay-openapi-05", Body: sampleBody},
		{Method: "GET", Path: "/api/ops/workers", Principal: "operator"},
		{Method: "GET", Path: "/api/ops/workers", Principal: "alice"},
		{Method: "GET", Path: "/api/ops/audit", Principal: "operator"},
		{Method: "GET", Path: "/api/ops/audit?limit=20&before=1", Principal: "operator"},
		{Method: "GET", Path: "/api/ops/audit?before=x", Principal: "operator"},
		{Method: "GET", Path: "/api/ops/audit", Principal: "alice"},
		{Method: "GET", Path: "/healthz"},
		{Method: "GET", Path: "/readyz"},
		{Method: "GET", Path: "/metrics"},
	}
	cases = append(cases, chunkedCases...)
	cases = append(cases, uploadCases...)
	seen := map[string]bool{}
	for _, r := range cases {
		hr := e.request(r)
		res := e.send(hr.Clone(context.Background()))
		route, params, err := router.FindRoute(hr)
		if err != nil {
			t.Fatalf("%s %s: no route in the spec: %v", r.Method, r.Path, err)
		}
		input := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &openapi3filter.RequestValidationInput{
				Request: hr, PathParams: params, Route: route,
				Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
			},
			Status: res.Status,
			Header: res.Header,
			Body:   io.NopCloser(bytes.NewReader(res.Body)),
			Options: &openapi3filter.Options{
				IncludeResponseStatus: true,
				// Prometheus text and plain bodies are not JSON.
				ExcludeResponseBody: !strings.Contains(res.Header.Get("Content-Type"), "json"),
			},
		}
		if err := openapi3filter.ValidateResponse(context.Background(), input); err != nil {
			t.Errorf("%s %s -> %d: %v", r.Method, r.Path, res.Status, err)
		}
		seen[route.Method+" "+route.Path] = true
	}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if !seen[method+" "+path] {
				t.Errorf("operation %s %s not exercised", method, path)
			}
		}
	}
}
