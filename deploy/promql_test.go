package deploy_test

import (
	"slices"
	"strings"
	"testing"
)

// promqlWords are the PromQL words that are not metric names: keywords,
// binary set operators, modifiers and aggregation operators (an aggregation
// may be followed by "by (...)" rather than by its parenthesis, so it cannot
// be told apart from a selector by the next character alone).
var promqlWords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "and": true, "or": true, "unless": true, "offset": true, "atan2": true,
	"inf": true, "nan": true,
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true,
}

// promqlLabelLists are the words followed by a parenthesized list of label
// names, which are not metric names either.
var promqlLabelLists = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

// metricNames returns the metric names a PromQL expression selects, in
// order of first use: identifiers followed by a label matcher "{", a range
// "[" or used bare, but not function calls, keywords, aggregation operators,
// label names (inside matchers and by/without/on/ignoring/group_* lists),
// string literals, numbers, durations or Grafana variables ($x, ${x}).
func metricNames(expr string) []string {
	var names []string
	s := expr
	i := 0
	skipSpace := func() {
		for i < len(s) && strings.ContainsRune(" \t\r\n", rune(s[i])) {
			i++
		}
	}
	skipString := func() { // s[i] is the opening quote
		q := s[i]
		for i++; i < len(s) && s[i] != q; i++ {
			if s[i] == '\\' && q != '`' {
				i++
			}
		}
		i++
	}
	skipTo := func(close byte) { // s[i] is the opening bracket
		for i++; i < len(s) && s[i] != close; {
			if s[i] == '"' || s[i] == '\'' || s[i] == '`' {
				skipString()
				continue
			}
			i++
		}
		i++
	}
	isIdentStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isIdent := func(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }
	for i < len(s) {
		c := s[i]
		switch {
		case c == '#': // comment to the end of the line
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			skipString()
		case c == '{':
			skipTo('}')
		case c == '[':
			skipTo(']')
		case c == '$': // a Grafana variable: $name or ${name}
			i++
			if i < len(s) && s[i] == '{' {
				skipTo('}')
			}
			for i < len(s) && isIdent(s[i]) {
				i++
			}
		case c >= '0' && c <= '9' || c == '.': // a number or a duration
			for i < len(s) && (isIdent(s[i]) || s[i] == '.') {
				if (s[i] == 'e' || s[i] == 'E') && i+1 < len(s) && (s[i+1] == '+' || s[i+1] == '-') {
					i++
				}
				i++
			}
		case isIdentStart(c):
			start := i
			for i < len(s) && isIdent(s[i]) {
				i++
			}
			word := s[start:i]
			skipSpace()
			lower := strings.ToLower(word)
			switch {
			case promqlLabelLists[lower]:
				if i < len(s) && s[i] == '(' {
					skipTo(')')
				}
			case promqlWords[lower]:
			case i < len(s) && s[i] == '(': // a function call
			default:
				if !slices.Contains(names, word) {
					names = append(names, word)
				}
			}
		default:
			i++
		}
	}
	return names
}

func TestMetricNames(t *testing.T) {
	cases := []struct {
		expr string
		want []string
	}{
		{`max(mightyetl_outbox_backlog) > 10000`, []string{"mightyetl_outbox_backlog"}},
		{`sum by (job, instance) (rate(a_total{outcome="db_error"}[5m])) > 0`, []string{"a_total"}},
		{`sum(rate(a_total[10m])) by (le) / sum without (x) (rate(b_total{y=~"p{1}|q"}[10m]))`, []string{"a_total", "b_total"}},
		{`histogram_quantile(0.99, sum by (le) (rate(c_seconds_bucket[$__rate_interval])))`, []string{"c_seconds_bucket"}},
		{"d > 0\n  and on (instance) group_left (build) e_info == bool 1e-3 # f_not_a_metric", []string{"d", "e_info"}},
		{`clamp_min(sum(increase(g[15m] offset 1h)), 1) unless count(h{route="x y"})`, []string{"g", "h"}},
		{`sum(rate(i{route=~"POST /api/(jobs|process)"}[${range}])) or vector(0)`, []string{"i"}},
		{`job:requests:rate5m * 2`, []string{"job:requests:rate5m"}},
	}
	for _, c := range cases {
		if got := metricNames(c.expr); !slices.Equal(got, c.want) {
			t.Errorf("metricNames(%q) = %q, want %q", c.expr, got, c.want)
		}
	}
}
