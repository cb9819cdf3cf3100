package httpapi

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/console"
)

// consoleHeaders are the security headers every console response carries.
var consoleHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
	"X-Frame-Options":        "DENY",
	"X-Content-Type-Options": "nosniff",
	"Referrer-Policy":        "same-origin",
	"Cache-Control":          "no-store",
}

func checkConsoleHeaders(t *testing.T, what string, res response) {
	t.Helper()
	for k, want := range consoleHeaders {
		if got := res.Header.Values(k); len(got) != 1 || got[0] != want {
			t.Errorf("%s (%d): %s = %q, want %q", what, res.Status, k, got, want)
		}
	}
}

var noticeRE = regexp.MustCompile(`<p class="notice"[^>]*>([^<]*)</p>`)

// noticeOf is the text of the page's notice, "" when it shows none.
func noticeOf(t *testing.T, res response) string {
	t.Helper()
	m := noticeRE.FindAllSubmatch(res.Body, -1)
	switch len(m) {
	case 0:
		return ""
	case 1:
		return html.UnescapeString(string(m[0][1]))
	}
	t.Fatalf("%d notices on one page", len(m))
	return ""
}

// consoleForm posts a console form as the operator from the console's own
// origin, with the operator's CSRF token, and does not follow the redirect.
func (e *env) consoleForm(path string, form url.Values) response {
	e.t.Helper()
	op := console.Operator{ScopeHash: auth.ScopeHash(testHashKey, "operator")}
	form.Set("csrf", e.opts.Console.CSRFToken(op))
	hr := e.request(req{Method: "POST", Path: path, Principal: "operator", Body: form.Encode(),
		Header: map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": e.srv.URL}})
	res, err := noRedirectClient(e).Do(hr)
	if err != nil {
		e.t.Fatalf("POST %s: %v", path, err)
	}
	defer res.Body.Close()
	return response{Status: res.StatusCode, Header: res.Header}
}

func noRedirectClient(e *env) *http.Client {
	c := *e.srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

// TestConsoleSecurityHeadersOnEveryResponse: pages, refusals (401, 403),
// the 404 page, an asset, the /console redirect and a form POST's 303 all
// carry the console's CSP, X-Frame-Options, X-Content-Type-Options,
// Referrer-Policy and Cache-Control.
func TestConsoleSecurityHeadersOnEveryResponse(t *testing.T) {
	e := newEnv(t)
	job, _ := e.submit("alice", "console-headers-0001", sampleBody)
	for _, tc := range []struct {
		what, path, principal string
		status                int
	}{
		{"overview", "/console/", "operator", http.StatusOK},
		{"job page", "/console/jobs/" + job.JobRecordID, "operator", http.StatusOK},
		{"no credentials", "/console/", "", http.StatusUnauthorized},
		{"no credentials, job page", "/console/jobs/" + job.JobRecordID, "", http.StatusUnauthorized},
		{"unusable principal", "/console/", "-", http.StatusUnauthorized},
		{"not an operator", "/console/jobs", "alice", http.StatusForbidden},
		{"no such page", "/console/nowhere", "operator", http.StatusNotFound},
		{"no such job", "/console/jobs/not-a-uuid", "operator", http.StatusNotFound},
		{"asset", "/console/assets/console.css", "operator", http.StatusOK},
		{"asset without credentials", "/console/assets/console.js", "", http.StatusUnauthorized},
	} {
		res := e.do(req{Method: "GET", Path: tc.path, Principal: tc.principal})
		if res.Status != tc.status {
			t.Errorf("%s: GET %s %d, want %d", tc.what, tc.path, res.Status, tc.status)
		}
		checkConsoleHeaders(t, tc.what, res)
	}
	hr := e.request(req{Method: "GET", Path: "/console"})
	res, err := noRedirectClient(e).Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMovedPermanently {
		t.Errorf("GET /console %d, want 301", res.StatusCode)
	}
	checkConsoleHeaders(t, "/console redirect", response{Status: res.StatusCode, Header: res.Header})

	post := e.consoleForm("/console/jobs/"+job.JobRecordID+"/cancel", url.Values{})
	if post.Status != http.StatusSeeOther {
		t.Errorf("cancel form: %d, want 303", post.Status)
	}
	checkConsoleHeaders(t, "cancel redirect", post)
	refused := e.do(req{Method: "POST", Path: "/console/jobs/" + job.JobRecordID + "/cancel", Principal: "operator",
		Body: "csrf=wrong", Header: map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": e.srv.URL}})
	if refused.Status != http.StatusForbidden {
		t.Errorf("cancel form with a wrong token: %d, want 403", refused.Status)
	}
	checkConsoleHeaders(t, "refused form", refused)
}

// TestConsoleNoticesAreFixedTexts: a page shows only the fixed text of a
// known notice code; any other ?notice= text, on any page and on the
// refusal pages, is never reflected; each action redirects with its code.
func TestConsoleNoticesAreFixedTexts(t *testing.T) {
	e := newEnv(t)
	job, _ := e.submit("alice", "console-notice-0001", sampleBody)
	const marker = "zq-forged-notice-7f3a"
	forged := url.QueryEscape(`<b>` + marker + `</b> Your session expired: sign in at https://evil.example`)
	for _, p := range []struct{ path, principal string }{
		{"/console/", "operator"}, {"/console/jobs", "operator"}, {"/console/jobs/" + job.JobRecordID, "operator"},
		{"/console/workers", "operator"}, {"/console/nowhere", "operator"},
		{"/console/", ""}, {"/console/jobs/" + job.JobRecordID, ""}, {"/console/", "alice"},
	} {
		for _, q := range []string{"notice=" + forged, "notice=cancelled&notice=" + forged, "notice=bulk-cancelled&cancelled=" + forged} {
			res := e.do(req{Method: "GET", Path: p.path + "?" + q, Principal: p.principal})
			if strings.Contains(string(res.Body), marker) || strings.Contains(string(res.Body), "evil.example") {
				t.Errorf("GET %s?%s as %q (%d) reflects the notice text", p.path, q, p.principal, res.Status)
			}
		}
	}
	// Known codes by hand, and the bounds of the bulk count (cap 100).
	for q, want := range map[string]string{
		"notice=cancelled":                        "Cancelled.",
		"notice=not-cancelled":                    "Not cancelled: the job had already ended (its state is below).",
		"notice=replayed":                         "Replay created: this job replays the one named under Replay lineage.",
		"notice=replay-repeated":                  "This form already replayed that job; this is that replay (no new job was created).",
		"notice=bulk-cancelled&cancelled=0":       "Cancelled 0 jobs.",
		"notice=bulk-cancelled&cancelled=100":     "Cancelled 100 jobs.",
		"notice=bulk-cancelled&cancelled=101":     "",
		"notice=bulk-cancelled&cancelled=-1":      "",
		"notice=bulk-cancelled&cancelled=07":      "",
		"notice=bulk-cancelled":                   "",
		"notice=Cancelled.":                       "",
		"notice=unknown-code":                     "",
		"notice=%20cancelled":                     "",
		"cancelled=3":                             "",
		"notice=bulk-cancelled&cancelled=3&x=1":   "Cancelled 3 jobs.",
		"notice=bulk-cancelled&cancelled=3%20abc": "",
	} {
		if got := noticeOf(t, e.do(req{Method: "GET", Path: "/console/jobs?" + q, Principal: "operator"})); got != want {
			t.Errorf("/console/jobs?%s shows notice %q, want %q", q, got, want)
		}
		if got := noticeOf(t, e.do(req{Method: "GET", Path: "/console/?" + q})); got != "" {
			t.Errorf("the 401 page with ?%s shows notice %q", q, got)
		}
	}

	// The actions' redirects name codes, and the pages they lead to show
	// the codes' texts.
	follow := func(what string, res response, want string) string {
		t.Helper()
		loc := res.Header.Get("Location")
		if res.Status != http.StatusSeeOther || loc == "" {
			t.Fatalf("%s: %d Location %q", what, res.Status, loc)
		}
		u, err := url.Parse(loc)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(u.RawQuery, "+") || strings.Contains(u.RawQuery, "%20") {
			t.Errorf("%s: redirect %q carries text, not a code", what, loc)
		}
		if got := noticeOf(t, e.do(req{Method: "GET", Path: loc, Principal: "operator"})); got != want {
			t.Errorf("%s: %s shows %q, want %q", what, loc, got, want)
		}
		return u.Path
	}
	cancelPath := "/console/jobs/" + job.JobRecordID + "/cancel"
	follow("cancel", e.consoleForm(cancelPath, url.Values{}), "Cancelled.")
	follow("cancel again", e.consoleForm(cancelPath, url.Values{}),
		"Not cancelled: the job had already ended (its state is below).")
	replay := url.Values{"confirm": {"yes"}, "key": {"console-notice-replay-0001"}, "body": {sampleBody}}
	replayPath := "/console/jobs/" + job.JobRecordID + "/replay"
	child := follow("replay", e.consoleForm(replayPath, replay),
		"Replay created: this job replays the one named under Replay lineage.")
	if again := follow("replay again", e.consoleForm(replayPath, replay),
		"This form already replayed that job; this is that replay (no new job was created)."); again != child {
		t.Errorf("the repeated replay leads to %s, the first to %s", again, child)
	}
	follow("bulk cancel", e.consoleForm("/console/bulk-cancel", url.Values{"filter": {"state=PENDING"}, "count": {"1"}}),
		"Cancelled 1 jobs.")
}
