package httpapi

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// postRoute is one POST route of the API as a request to send.
type postRoute struct{ principal, path, key, body string }

// postRoutes returns a request for every POST operation of
// docs/openapi.yaml, so a documented POST route cannot be left out of the
// JSON-only rule's test: {id} is the FAILED job failed (replayable,
// cancellable), /api/ops/ routes are sent by the operator. It fails when a
// POST operation does not document its 415.
func postRoutes(t *testing.T, failed string) []postRoute {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bodies := map[string]string{"/api/etl/diagnostic-jobs": `{"durationMillis":1}`, "/api/etl/jobs/{id}/cancellation": "{}"}
	var routes []postRoute
	for i, tmpl := range doc.Paths.InMatchingOrder() {
		op := doc.Paths.Value(tmpl).Post
		if op == nil {
			continue
		}
		if op.Responses.Status(http.StatusUnsupportedMediaType) == nil {
			t.Errorf("POST %s documents no 415", tmpl)
		}
		r := postRoute{principal: "alice", path: strings.ReplaceAll(tmpl, "{id}", failed), body: sampleBody}
		if strings.HasPrefix(tmpl, "/api/ops/") {
			r.principal = "operator"
		}
		if b, ok := bodies[tmpl]; ok {
			r.body = b
		}
		for _, p := range op.Parameters {
			if p.Value != nil && p.Value.In == "header" && p.Value.Name == "Idempotency-Key" {
				r.key = fmt.Sprintf("key-media-route-%04d", i)
			}
		}
		routes = append(routes, r)
	}
	sort.Slice(routes, func(i, j int) bool { return routes[i].path < routes[j].path })
	return routes
}

// TestPostBodiesRequireJSON: every POST that carries a body, on every POST
// route of docs/openapi.yaml (the owner's and the operator's), must declare
// Content-Type: application/json (parameters allowed, charset utf-8 only,
// no +json suffix); anything a cross-site form or no-cors fetch can send is
// 415 etl_unsupported_media_type after authentication and before any work,
// and nothing is written.
func TestPostBodiesRequireJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	failed := finishJob(t, e, "alice", "key-media-source-0001", pg.StatusFailed)
	jobs := e.count(`SELECT count(*) FROM etl_job_records`)
	routes := postRoutes(t, failed)
	documented := map[string]bool{}
	for _, rt := range routes {
		documented[strings.ReplaceAll(rt.path, failed, "{id}")] = true
	}
	for _, want := range []string{"/api/etl/jobs", "/api/etl/diagnostic-jobs", "/api/etl/jobs/{id}/replays", "/api/etl/process",
		"/api/etl/jobs/{id}/cancellation", "/api/ops/jobs/{id}/replays"} {
		if !documented[want] {
			t.Errorf("docs/openapi.yaml lists no POST %s", want)
		}
	}
	refused := []string{
		"", // no Content-Type at all
		"text/plain",
		"text/plain; charset=utf-8",
		"application/x-www-form-urlencoded",
		"multipart/form-data; boundary=x",
		"application/json; charset=iso-8859-1",
		"application/merge-patch+json",
		"application/problem+json",
		"application/jsonx",
		"application/json; charset", // malformed parameter
	}
	for _, rt := range routes {
		for _, ct := range refused {
			res := e.do(req{Method: "POST", Path: rt.path, Principal: rt.principal, Key: rt.key, Body: rt.body, Header: map[string]string{"Content-Type": ct}})
			if res.Status != http.StatusUnsupportedMediaType {
				t.Errorf("POST %s with Content-Type %q: %d %s, want 415", rt.path, ct, res.Status, res.Body)
				continue
			}
			checkProblem(t, res, rt.path, 415, codes.UnsupportedMediaType)
		}
		// Two Content-Type fields are refused too.
		hr, _ := http.NewRequest("POST", e.srv.URL+rt.path, strings.NewReader(rt.body))
		hr.Header.Set("Authorization", "Test "+rt.principal)
		if rt.key != "" {
			hr.Header.Set("Idempotency-Key", rt.key)
		}
		hr.Header.Add("Content-Type", "application/json")
		hr.Header.Add("Content-Type", "text/plain")
		if res := e.send(hr); res.Status != http.StatusUnsupportedMediaType {
			t.Errorf("POST %s with two Content-Type fields: %d", rt.path, res.Status)
		}
		// Authentication still comes first.
		if res := e.do(req{Method: "POST", Path: rt.path, Key: rt.key, Body: rt.body, Header: map[string]string{"Content-Type": "text/plain"}}); res.Status != http.StatusUnauthorized {
			t.Errorf("POST %s unauthenticated text/plain: %d, want 401", rt.path, res.Status)
		}
	}
	if n := e.count(`SELECT count(*) FROM etl_job_records`); n != jobs {
		t.Fatalf("refused requests wrote %d jobs", n-jobs)
	}
	if n := e.count(`SELECT count(*) FROM processed_data`); n != 0 {
		t.Fatalf("refused requests loaded %d rows", n)
	}

	// Accepted forms: case-insensitive type, any parameters, utf-8 charset.
	for i, ct := range []string{"application/json", "Application/JSON; charset=UTF-8", "application/json;charset=utf-8", `application/json; profile="x"`, "application/json;"} {
		res := e.do(req{Method: "POST", Path: "/api/etl/process", Principal: "alice", Body: sampleBody, Header: map[string]string{"Content-Type": ct}})
		if res.Status != http.StatusOK {
			t.Errorf("process with %q: %d %s", ct, res.Status, res.Body)
		}
		key := "key-media-accept-000" + string(rune('1'+i))
		if res := e.do(req{Method: "POST", Path: "/api/etl/jobs", Principal: "alice", Key: key, Body: sampleBody, Header: map[string]string{"Content-Type": ct}}); res.Status != http.StatusAccepted {
			t.Errorf("submit with %q: %d %s", ct, res.Status, res.Body)
		}
	}
	// A POST without a body needs no Content-Type (cancellation).
	s, _ := e.submit("alice", "key-media-cancel-src1", sampleBody)
	if res := e.do(req{Method: "POST", Path: "/api/etl/jobs/" + s.JobRecordID + "/cancellation", Principal: "alice", Key: "key-media-cancel-0002"}); res.Status != http.StatusOK {
		t.Errorf("bodiless cancellation: %d %s", res.Status, res.Body)
	}
}
