package deploy_test

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// runbookBase is the base URL of every alert's runbook_url (documented in
// the rules file's header): the repository's main branch on GitHub. What
// follows it is a path from the repository root and a heading anchor.
const runbookBase = "https://github.com/mightyetl/mightyetl/blob/main/"

// TestAlertsLinkToRunbookSections: every alert has a runbook_url of the
// form runbookBase + docs/operations/<file>.md#<anchor>, the file exists in
// this checkout and one of its headings has that anchor.
func TestAlertsLinkToRunbookSections(t *testing.T) {
	anchorsOf := map[string]map[string]bool{}
	var alerts int
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			u := r.Annotations["runbook_url"]
			rel, ok := strings.CutPrefix(u, runbookBase)
			if !ok {
				t.Errorf("%s: runbook_url %q does not start with %s", r.Alert, u, runbookBase)
				continue
			}
			path, anchor, _ := strings.Cut(rel, "#")
			if !strings.HasPrefix(path, "docs/operations/") || !strings.HasSuffix(path, ".md") || anchor == "" {
				t.Errorf("%s: runbook_url %q is not docs/operations/<file>.md#<section>", r.Alert, u)
				continue
			}
			anchors, seen := anchorsOf[path]
			if !seen {
				anchors = headingAnchors(t, filepath.Join("..", filepath.FromSlash(path)))
				anchorsOf[path] = anchors
			}
			if anchors == nil {
				t.Errorf("%s: runbook %s does not exist", r.Alert, path)
			} else if !anchors[anchor] {
				t.Errorf("%s: %s has no heading with anchor #%s", r.Alert, path, anchor)
			}
		}
	}
	if alerts == 0 {
		t.Fatal("no alerts in " + rulesFile)
	}
}

// headingAnchors returns the anchors GitHub gives the Markdown headings of
// file (outside fenced code blocks), or nil when the file does not exist.
func headingAnchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	f, err := os.Open(file)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	anchors := map[string]bool{}
	count := map[string]int{}
	fenced := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		a := githubAnchor(text)
		if n := count[a]; n > 0 {
			anchors[a+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[a] = true
		}
		count[a]++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return anchors
}

// githubAnchor is GitHub's heading anchor: lower case, letters, digits,
// hyphens and underscores kept, spaces turned into hyphens, the rest
// dropped.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func TestGithubAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"Stale-claim spikes":             "stale-claim-spikes",
		"Event-driven intake (requests)": "event-driven-intake-requests",
		"From an alert to a trace":       "from-an-alert-to-a-trace",
		"`OTEL_*` variables":             "otel_-variables",
	} {
		if got := githubAnchor(heading); got != want {
			t.Errorf("githubAnchor(%q) = %q, want %q", heading, got, want)
		}
	}
}
