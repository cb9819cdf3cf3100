package deploy_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const (
	dashboardFile = "grafana/mightyetl.json"
	rulesFile     = "prometheus/mightyetl.rules.yml"
	// minSchemaVersion is Grafana 11.0's dashboard schema; the file is kept
	// at a current Grafana's version (12.x writes 41).
	minSchemaVersion = 39
)

type dashboard struct {
	SchemaVersion int               `json:"schemaVersion"`
	UID           string            `json:"uid"`
	Links         []json.RawMessage `json:"links"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int               `json:"id"`
	Type       string            `json:"type"`
	Title      string            `json:"title"`
	Datasource *datasource       `json:"datasource"`
	Links      []json.RawMessage `json:"links"`
	Targets    []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's panels
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// allPanels flattens rows: the panels of the dashboard and of collapsed rows.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// query is one PromQL expression and where it comes from, for messages.
type query struct {
	where string
	expr  string
}

func dashboardQueries(t *testing.T) []query {
	t.Helper()
	var qs []query
	for _, p := range allPanels(loadDashboard(t).Panels) {
		for _, tg := range p.Targets {
			qs = append(qs, query{where: dashboardFile + ": panel " + p.Title + " " + tg.RefID, expr: tg.Expr})
		}
	}
	return qs
}

type rulesDoc struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func loadRules(t *testing.T) rulesDoc {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc rulesDoc
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	if len(doc.Groups) == 0 {
		t.Fatalf("%s: no rule groups", rulesFile)
	}
	return doc
}

func ruleQueries(t *testing.T) []query {
	t.Helper()
	var qs []query
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			qs = append(qs, query{where: rulesFile + ": " + r.Alert + r.Record, expr: r.Expr})
		}
	}
	return qs
}

// TestDashboardShape: the dashboard is at a current schema version, selects
// its Prometheus through a datasource variable that every panel and query
// uses, links nowhere outside Grafana, and every graph panel has queries.
func TestDashboardShape(t *testing.T) {
	d := loadDashboard(t)
	if d.SchemaVersion < minSchemaVersion {
		t.Errorf("schemaVersion %d, want >= %d", d.SchemaVersion, minSchemaVersion)
	}
	if d.UID == "" {
		t.Error("no uid: links to the dashboard would change on every import")
	}
	var hasVar bool
	for _, v := range d.Templating.List {
		if v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus" {
			hasVar = true
		}
	}
	if !hasVar {
		t.Error(`no templating variable {"name":"datasource","type":"datasource","query":"prometheus"}`)
	}
	if len(d.Links) != 0 {
		t.Errorf("dashboard links %s: want none", d.Links)
	}
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if u := regexp.MustCompile(`https?://[^"\s]*`).Find(raw); u != nil {
		t.Errorf("external link %s in the dashboard", u)
	}
	ids := map[int]string{}
	var graphs int
	for _, p := range allPanels(d.Panels) {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if len(p.Links) != 0 {
			t.Errorf("panel %q has links", p.Title)
		}
		if p.Type == "row" {
			continue
		}
		graphs++
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want uid ${datasource}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no queries", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q query %s: datasource %+v, want uid ${datasource}", p.Title, tg.RefID, tg.Datasource)
			}
			if len(metricNames(tg.Expr)) == 0 {
				t.Errorf("panel %q query %s selects no metric: %q", p.Title, tg.RefID, tg.Expr)
			}
		}
	}
	if graphs == 0 {
		t.Error("no graph panels")
	}
}

// families parses a Prometheus text exposition into metric family names
// and types ("counter", "gauge", "histogram", "summary", "untyped"). A
// sample without a TYPE line counts as an untyped family of its own name.
func families(t *testing.T, exposition []byte) map[string]string {
	t.Helper()
	fams := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(exposition))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	var lastType string // the family named by the last TYPE line
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			f := strings.Fields(rest)
			if len(f) != 2 {
				t.Fatalf("malformed TYPE line %q", line)
			}
			fams[f[0]], lastType = f[1], f[0]
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := line[:strings.IndexAny(line+" ", "{ ")]
		if _, known := fams[name]; !known && !strings.HasPrefix(name, lastType) {
			fams[name] = "untyped"
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return fams
}

// exported reports whether a queried series name is in fams: a family of
// that name, or a histogram's _bucket, _sum or _count series, or a
// summary's _sum or _count series, or (OpenMetrics, where a counter's family
// name has no _total) a counter's _total series.
func exported(fams map[string]string, name string) bool {
	if _, ok := fams[name]; ok {
		return true
	}
	for suffix, types := range map[string][]string{
		"_bucket": {"histogram"},
		"_sum":    {"histogram", "summary"},
		"_count":  {"histogram", "summary"},
		"_total":  {"counter"},
	} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			for _, typ := range types {
				if fams[base] == typ {
					return true
				}
			}
		}
	}
	return false
}

// missingNames returns, for each name the queries use that fams does not
// export, the places that use it.
func missingNames(fams map[string]string, qs []query) map[string][]string {
	missing := map[string][]string{}
	for _, q := range qs {
		for _, n := range metricNames(q.expr) {
			if !exported(fams, n) {
				missing[n] = append(missing[n], q.where)
			}
		}
	}
	return missing
}

func TestExported(t *testing.T) {
	fams := families(t, []byte(`# HELP h_seconds x
# TYPE h_seconds histogram
h_seconds_bucket{le="1"} 0
h_seconds_bucket{le="+Inf"} 0
h_seconds_sum 0
h_seconds_count 0
# TYPE c_total counter
c_total{outcome="a"} 1
# TYPE s summary
s{quantile="0.5"} 1
s_sum 1
s_count 1
bare 3
`))
	for name, want := range map[string]bool{
		"h_seconds": true, "h_seconds_bucket": true, "h_seconds_sum": true, "h_seconds_count": true,
		"c_total": true, "c_total_count": false, "c_total_bucket": false, "c": false,
		"s": true, "s_sum": true, "s_count": true, "s_bucket": false,
		"bare": true, "bare_count": false, "missing": false,
	} {
		if got := exported(fams, name); got != want {
			t.Errorf("exported(%q) = %v, want %v", name, got, want)
		}
	}
	openMetrics := families(t, []byte(`# TYPE c counter
c_total{outcome="a"} 1
c_created{outcome="a"} 1.7e9
# TYPE h_seconds histogram
h_seconds_bucket{le="+Inf"} 1 # {trace_id="0af7651916cd43dd8448eb211c80319c"} 0.2
h_seconds_sum 0.2
h_seconds_count 1
# EOF
`))
	for name, want := range map[string]bool{
		"c_total": true, "c": true, "h_seconds_bucket": true, "h_seconds_total": false, "c_created": false,
	} {
		if got := exported(openMetrics, name); got != want {
			t.Errorf("OpenMetrics: exported(%q) = %v, want %v", name, got, want)
		}
	}
}
