package console

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestRateChart: the chart's states from no rate to many, its axes in
// jobs/s with time labels, and where the points land.
func TestRateChart(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	labels := func(svg string) []string {
		var out []string
		for _, m := range regexp.MustCompile(`<text[^>]*>([^<]*)</text>`).FindAllStringSubmatch(svg, -1) {
			out = append(out, m[1])
		}
		return out
	}
	point := func(ago time.Duration, claimsPerMin, finishesPerMin float64) RatePoint {
		return RatePoint{At: now.Add(-ago), ClaimsPerMin: claimsPerMin, FinishesPerMin: finishesPerMin, intervalSeconds: 30}
	}
	for _, tc := range []struct {
		name      string
		points    []RatePoint
		next      time.Duration
		status    string // the rate-status line, tags removed
		labels    []string
		polylines int
		dots      int
	}{
		{name: "no sample yet", next: 30 * time.Second,
			status:    "Collecting samples: the first rate appears after 30 s. A rate needs two samples of the claim and finish counters; the console takes one every 30 s.",
			labels:    []string{"0", "0.5", "1", "jobs/s", "15 min ago", "10 min ago", "5 min ago", "now", "collecting samples…"},
			polylines: 0, dots: 0},
		{name: "one sample, rounds the wait up", next: 12100 * time.Millisecond,
			status: "Collecting samples: the first rate appears after 13 s. A rate needs two samples of the claim and finish counters; the console takes one every 30 s.",
			labels: []string{"0", "0.5", "1", "jobs/s", "15 min ago", "10 min ago", "5 min ago", "now", "collecting samples…"}},
		{name: "sample due now says at least 1 s", next: 0,
			status: "Collecting samples: the first rate appears after 1 s. A rate needs two samples of the claim and finish counters; the console takes one every 30 s.",
			labels: []string{"0", "0.5", "1", "jobs/s", "15 min ago", "10 min ago", "5 min ago", "now", "collecting samples…"}},
		{name: "one rate is a dot per series", points: []RatePoint{point(0, 90, 60)},
			status: "claims 1.5 jobs/s, finishes 1 jobs/s (latest, over 30 s); peak 1.5 jobs/s over 1 rates",
			labels: []string{"0", "1", "2", "jobs/s", "15 min ago", "10 min ago", "5 min ago", "now"},
			dots:   2},
		{name: "several rates are lines", points: []RatePoint{point(time.Minute, 600, 0), point(30*time.Second, 6000, 60), point(0, 3, 3)},
			status:    "claims 0.05 jobs/s, finishes 0.05 jobs/s (latest, over 30 s); peak 100 jobs/s over 3 rates",
			labels:    []string{"0", "50", "100", "jobs/s", "15 min ago", "10 min ago", "5 min ago", "now"},
			polylines: 2, dots: 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			html := string(rateChart(tc.points, now, tc.next, 30*time.Second))
			svg, status, ok := strings.Cut(html, `<p id="rate-status"`)
			if !ok {
				t.Fatalf("no rate-status line:\n%s", html)
			}
			status = regexp.MustCompile(`<[^>]*>`).ReplaceAllString(`<p`+status, "")
			if status != tc.status {
				t.Errorf("status line %q, want %q", status, tc.status)
			}
			if got := labels(svg); strings.Join(got, "|") != strings.Join(tc.labels, "|") {
				t.Errorf("labels %q, want %q", got, tc.labels)
			}
			if n := strings.Count(svg, "<polyline"); n != tc.polylines {
				t.Errorf("%d polylines, want %d", n, tc.polylines)
			}
			if n := strings.Count(svg, "<circle"); n != tc.dots {
				t.Errorf("%d dots, want %d", n, tc.dots)
			}
		})
	}

	// Where the latest claims dot lands: x at the right end (now), y at
	// the top of the plot for the peak, at the bottom for 0.
	svg := string(rateChart([]RatePoint{point(15*time.Minute, 0, 0), point(0, 120, 0)}, now, 0, 30*time.Second))
	for _, want := range []string{`<circle class="claims" cx="56.0" cy="170.0" r="3"/>`, `<circle class="claims" cx="544.0" cy="24.0" r="3"/>`} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %s:\n%s", want, svg)
		}
	}
}

func TestNiceCeil(t *testing.T) {
	for _, tc := range []struct{ in, want float64 }{
		{0, 1}, {-1, 1}, {0.01, 0.01}, {0.011, 0.02}, {0.3, 0.5}, {1, 1}, {1.01, 2}, {2, 2}, {4.9, 5}, {5.1, 10}, {100, 100}, {101, 200},
	} {
		if got := niceCeil(tc.in); got != tc.want {
			t.Errorf("niceCeil(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
