package console

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mightyetl/mightyetl/internal/pg"
)

// The job page's progress of a large (chunked) job: a bar, the rate and an
// estimate of the time left. Everything is computed here, server-side, from
// observations of the load's checkpoint: (records done, checkpoint time by
// the database clock). The page itself is one observation; the script
// (console.js) refreshes the progress section every few seconds and sends
// back the observations the last rendering named (seenParam), so the rate
// is the one between the last two checkpoints seen; without them (the
// first rendering, a reload by hand) it is the average since submission.

// seenParam is the job page's query parameter of earlier observations:
// up to maxSeen "<records done>:<checkpoint unix µs>", comma-separated,
// newest first. Only display depends on it.
const (
	seenParam = "seen"
	maxSeen   = 2
)

// observation is one look at a load's checkpoint.
type observation struct {
	Done int64     // records loaded + skipped as bad
	At   time.Time // checkpoint_at (database clock)
}

func (o observation) String() string {
	return strconv.FormatInt(o.Done, 10) + ":" + strconv.FormatInt(o.At.UnixMicro(), 10)
}

// parseSeen parses the seen parameter; malformed entries are dropped (they
// only ever cost the rate its precision).
func parseSeen(s string) []observation {
	var out []observation
	for _, part := range strings.SplitN(s, ",", maxSeen+1) {
		done, at, ok := strings.Cut(part, ":")
		if !ok {
			continue
		}
		n, err1 := strconv.ParseInt(done, 10, 64)
		us, err2 := strconv.ParseInt(at, 10, 64)
		if err1 != nil || err2 != nil || n < 0 || us <= 0 {
			continue
		}
		out = append(out, observation{Done: n, At: time.UnixMicro(us).UTC()})
		if len(out) == maxSeen {
			break
		}
	}
	return out
}

// progressView is what job.html shows of a chunked job's load.
type progressView struct {
	pg.OpsProgress
	// Live is true while the job may still move (PENDING, RUNNING): the
	// script refreshes the section.
	Live bool
	// Done is records loaded plus records skipped as bad.
	Done int64
	// The bar: Value of Max in Unit ("records" when the total is known,
	// else "bytes" when the byte position is known); Max 0 means an
	// indeterminate bar.
	Value, Max int64
	Unit       string
	// Rate is records per second (0 when unknown) over RateBasis.
	Rate      float64
	RateBasis string
	// Left is the estimated time to load the rest at Rate, when the total
	// is known and Rate > 0 while Live.
	Left    time.Duration
	HasLeft bool
	// Seen is the seen parameter the next refresh sends: this rendering's
	// observation and the one before it.
	Seen string
}

// newProgressView computes the bar, the rate and the estimate of p for a
// job in status, given earlier observations (seen, newest first).
func newProgressView(p pg.OpsProgress, status string, seen []observation) progressView {
	v := progressView{OpsProgress: p, Live: status == pg.StatusPending || status == pg.StatusRunning,
		Done: p.RecordsLoaded + p.BadRecords}
	switch {
	case p.RecordsTotal != nil:
		v.Max, v.Value, v.Unit = *p.RecordsTotal, min(v.Done, *p.RecordsTotal), "records"
	case p.BytesDone != nil && p.PayloadBytes > 0:
		v.Max, v.Value, v.Unit = p.PayloadBytes, *p.BytesDone, "bytes"
	}
	if status == pg.StatusSucceeded && v.Max > 0 {
		v.Value = v.Max // the last chunk may have ended on a blank line or the array's end
	}
	if p.LastCheckpointAt == nil {
		return v
	}
	cur := observation{Done: v.Done, At: p.LastCheckpointAt.UTC().Truncate(time.Microsecond)}
	// The known observations, newest first, one per checkpoint; anything
	// after the current checkpoint or ahead of its count is not a
	// checkpoint of this load and is ignored.
	obs := []observation{cur}
	for _, o := range seen {
		if o.At.Before(cur.At) && o.Done <= cur.Done && !slices.ContainsFunc(obs, func(x observation) bool { return x.At.Equal(o.At) }) {
			obs = append(obs, o)
		}
	}
	slices.SortFunc(obs, func(a, b observation) int { return b.At.Compare(a.At) })
	obs = obs[:min(len(obs), maxSeen)]
	seenParts := make([]string, len(obs))
	for i, o := range obs {
		seenParts[i] = o.String()
	}
	v.Seen = strings.Join(seenParts, ",")
	if len(obs) == 2 {
		v.Rate = float64(obs[0].Done-obs[1].Done) / obs[0].At.Sub(obs[1].At).Seconds()
		v.RateBasis = "between the last two checkpoints seen"
	} else if d := cur.At.Sub(p.CreatedAt); d > 0 {
		v.Rate = float64(cur.Done) / d.Seconds()
		v.RateBasis = "on average since submission"
	}
	if v.Live && p.RecordsTotal != nil && v.Rate > 0 {
		left := max(*p.RecordsTotal-v.Done, 0)
		v.Left, v.HasLeft = roundLeft(time.Duration(float64(left)/v.Rate*float64(time.Second))), true
	}
	return v
}

// roundLeft rounds an estimate to what it can mean: seconds under ten
// minutes, minutes under ten hours, hours beyond.
func roundLeft(d time.Duration) time.Duration {
	switch {
	case d < 10*time.Minute:
		return d.Round(time.Second)
	case d < 10*time.Hour:
		return d.Round(time.Minute)
	}
	return d.Round(time.Hour)
}

// Percent is the bar's fill in percent with one decimal ("" for an
// indeterminate bar).
func (v progressView) Percent() string {
	if v.Max <= 0 {
		return ""
	}
	return strconv.FormatFloat(math.Floor(1000*float64(v.Value)/float64(v.Max))/10, 'f', 1, 64) + "%"
}

// FailedRecord is the number of the record that failed the job, "" when
// none did.
func (v progressView) FailedRecord() string {
	if v.FailedRecordNumber == nil {
		return ""
	}
	return group(*v.FailedRecordNumber)
}

// RateText is the rate as the page says it, "" when unknown.
func (v progressView) RateText() string {
	if v.RateBasis == "" {
		return ""
	}
	switch r := v.Rate; {
	case r >= 100:
		return group(int64(math.Round(r))) + " records/s"
	case r >= 1:
		return strconv.FormatFloat(r, 'f', 1, 64) + " records/s"
	}
	return strconv.FormatFloat(v.Rate, 'f', 3, 64) + " records/s"
}

// group writes n with thousands separators: 1234567 -> "1,234,567".
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// bytesText is n bytes in binary units with one decimal, and exactly.
func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return group(n) + " bytes"
	}
	f, u := float64(n), ""
	for _, name := range []string{"KiB", "MiB", "GiB", "TiB", "PiB"} {
		f, u = f/unit, name
		if f < unit {
			break
		}
	}
	return fmt.Sprintf("%.1f %s (%s bytes)", f, u, group(n))
}
