package console

import (
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"
	"time"
)

// Geometry of the rate chart, in SVG user units: the plot area and the
// margins around it that hold the axis labels.
const (
	chartW, chartH = 560.0, 200.0
	plotL, plotR   = 56.0, 544.0
	plotT, plotB   = 24.0, 170.0
)

// rateChart draws the claim and finish rates of the last rateWindow as an
// inline SVG rendered on the server (no script needed) and a line of text
// under it with id "rate-status":
//
//   - a y axis in jobs/s (the points' per-minute rates divided by 60) from 0
//     to the peak rounded up to 1, 2 or 5 times a power of ten (1 when every
//     rate is 0), with a grid line at 0, half and the top;
//   - an x axis of the rateWindow ending at now (the database clock the
//     points are stamped on), labelled "15 min ago" … "now";
//   - per series a line through the points and a dot on each, so a single
//     rate shows.
//
// A rate needs two samples of the counters, so until the first one the
// chart draws its empty axes and the text line says "Collecting samples:
// the first rate appears after N s", N being next (the time until the
// sampler's next sample) rounded up to whole seconds, at least 1; every is
// the sample spacing it names. With rates the line gives the latest ones
// and the peak.
func rateChart(points []RatePoint, now time.Time, next, every time.Duration) template.HTML {
	perSec := func(perMin float64) float64 { return perMin / 60 }
	peak := 0.0
	for _, p := range points {
		peak = max(peak, perSec(p.ClaimsPerMin), perSec(p.FinishesPerMin))
	}
	top := niceCeil(peak)
	x := func(t time.Time) float64 {
		f := 1 - float64(now.Sub(t))/float64(rateWindow)
		return plotL + (plotR-plotL)*min(1, max(0, f))
	}
	y := func(v float64) float64 { return plotB - (plotB-plotT)*v/top }

	title := "Claims and finishes per second, last 15 minutes: no rate yet"
	if len(points) > 0 {
		last := points[len(points)-1]
		title = fmt.Sprintf("Claims and finishes per second, last 15 minutes: latest %s claims/s, %s finishes/s",
			fmtRate(perSec(last.ClaimsPerMin)), fmtRate(perSec(last.FinishesPerMin)))
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %g %g" role="img" aria-labelledby="chart-title"><title id="chart-title">%s</title>`,
		chartW, chartH, template.HTMLEscapeString(title))
	// The y axis: grid lines with their values, the unit above them.
	for _, v := range []float64{0, top / 2, top} {
		fmt.Fprintf(&b, `<line class="grid" x1="%g" y1="%.1f" x2="%g" y2="%.1f"/><text class="tick" x="%g" y="%.1f" text-anchor="end">%s</text>`,
			plotL, y(v), plotR, y(v), plotL-6, y(v)+4, fmtRate(v))
	}
	fmt.Fprintf(&b, `<text class="unit" x="%g" y="%g" text-anchor="end">jobs/s</text>`, plotL-6, plotT-10)
	fmt.Fprintf(&b, `<line class="axis" x1="%g" y1="%g" x2="%g" y2="%g"/><line class="axis" x1="%g" y1="%g" x2="%g" y2="%g"/>`,
		plotL, plotT, plotL, plotB, plotL, plotB, plotR, plotB)
	// The x axis: a tick and a label every 5 minutes.
	for _, m := range []int{15, 10, 5, 0} {
		at := x(now.Add(-time.Duration(m) * time.Minute))
		label, anchor := strconv.Itoa(m)+" min ago", "middle"
		switch m {
		case 15:
			anchor = "start"
		case 0:
			label, anchor = "now", "end"
		}
		fmt.Fprintf(&b, `<line class="axis" x1="%.1f" y1="%g" x2="%.1f" y2="%g"/><text class="tick" x="%.1f" y="%g" text-anchor="%s">%s</text>`,
			at, plotB, at, plotB+4, at, plotB+20, anchor, label)
	}
	series := func(class string, get func(RatePoint) float64) {
		if len(points) > 1 {
			fmt.Fprintf(&b, `<polyline class="%s" points="`, class)
			for _, p := range points {
				fmt.Fprintf(&b, "%.1f,%.1f ", x(p.At), y(perSec(get(p))))
			}
			b.WriteString(`"/>`)
		}
		for _, p := range points {
			fmt.Fprintf(&b, `<circle class="%s" cx="%.1f" cy="%.1f" r="3"/>`, class, x(p.At), y(perSec(get(p))))
		}
	}
	series("claims", func(p RatePoint) float64 { return p.ClaimsPerMin })
	series("finishes", func(p RatePoint) float64 { return p.FinishesPerMin })
	if len(points) == 0 {
		fmt.Fprintf(&b, `<text class="empty" x="%g" y="%g" text-anchor="middle">collecting samples…</text>`,
			(plotL+plotR)/2, (plotT+plotB)/2)
	}
	b.WriteString(`</svg>`)

	if len(points) == 0 {
		fmt.Fprintf(&b, `<p id="rate-status" class="meta">Collecting samples: the first rate appears after %d s. `+
			`A rate needs two samples of the claim and finish counters; the console takes one every %s.</p>`,
			max(1, int(math.Ceil(next.Seconds()))), secondsText(every))
		return template.HTML(b.String())
	}
	last := points[len(points)-1]
	fmt.Fprintf(&b, `<p id="rate-status" class="legend"><span class="key claims">claims</span> %s jobs/s, `+
		`<span class="key finishes">finishes</span> %s jobs/s (latest, over %s); peak %s jobs/s over %d rates</p>`,
		fmtRate(perSec(last.ClaimsPerMin)), fmtRate(perSec(last.FinishesPerMin)),
		secondsText(time.Duration(last.intervalSeconds*float64(time.Second))), fmtRate(peak), len(points))
	return template.HTML(b.String())
}

// niceCeil is the least of 1, 2 and 5 times a power of ten that is at
// least v; 1 for v <= 0.
func niceCeil(v float64) float64 {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5} {
		if m*e >= v*(1-1e-9) {
			return m * e
		}
	}
	return 10 * e
}

// fmtRate writes a rate with at most three significant digits (whole
// numbers from 100 up).
func fmtRate(v float64) string {
	if v >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// secondsText writes a duration as whole seconds ("30 s").
func secondsText(d time.Duration) string {
	return strconv.FormatInt(int64(d.Round(time.Second)/time.Second), 10) + " s"
}
