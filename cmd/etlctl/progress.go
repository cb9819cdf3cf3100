package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/mightyetl/mightyetl/client"
)

// Progress display modes (--progress).
const (
	progressAuto  = "auto"  // bar when standard error is a terminal, else none
	progressBar   = "bar"   // one line redrawn in place
	progressPlain = "plain" // one line per change, for logs
	progressNone  = "none"
)

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progressMode resolves --progress for standard error w; ok false for an
// unknown mode.
func progressMode(mode string, w io.Writer) (string, bool) {
	switch mode {
	case "", progressAuto:
		if isTerminal(w) {
			return progressBar, true
		}
		return progressNone, true
	case progressBar, progressPlain, progressNone:
		return mode, true
	}
	return "", false
}

// meter writes progress lines on standard error: redrawn in place (bar),
// one per change (plain) or none. It is used from one goroutine. Times
// are the host's: they only pace the display and estimate a rate.
type meter struct {
	w     io.Writer
	mode  string
	start time.Time
	// last is when a bar was last drawn; lastLine the last line written.
	last     time.Time
	lastLine string
	drawn    bool
}

func newMeter(w io.Writer, mode string) *meter {
	return &meter{w: w, mode: mode, start: time.Now()}
}

// show writes line: a bar at most ten times a second unless final, a plain
// line when it differs from the last.
func (m *meter) show(line string, final bool) {
	switch m.mode {
	case progressBar:
		now := time.Now()
		if !final && m.drawn && now.Sub(m.last) < 100*time.Millisecond {
			return
		}
		m.last, m.drawn = now, true
		fmt.Fprintf(m.w, "\r\x1b[K%s", line)
	case progressPlain:
		if line != m.lastLine {
			fmt.Fprintln(m.w, line)
		}
	}
	m.lastLine = line
}

// end finishes a drawn bar's line, so what follows starts on a new one.
func (m *meter) end() {
	if m.mode == progressBar && m.drawn {
		fmt.Fprintln(m.w)
		m.drawn = false
	}
}

// bar is a bar of width cells filled to frac (0..1).
func bar(frac float64, width int) string {
	frac = min(max(frac, 0), 1)
	n := int(frac*float64(width) + 0.5)
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}

// humanBytes is n in B, KiB, MiB, GiB or TiB with one decimal.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 3 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGT"[i])
}

// eta is the remaining time at rate per second, rounded to the second.
func eta(remaining, rate float64) string {
	if rate <= 0 || remaining <= 0 {
		return ""
	}
	return " eta " + (time.Duration(remaining / rate * float64(time.Second))).Round(time.Second).String()
}

// uploadLine describes an upload's progress after elapsed.
func uploadLine(p client.UploadProgress, elapsed time.Duration) string {
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(p.Sent) / s
	}
	if p.Total < 0 {
		return fmt.Sprintf("upload %s sent, %d parts, %s/s", humanBytes(p.Bytes), p.Parts, humanBytes(int64(rate)))
	}
	frac := 1.0
	if p.Total > 0 {
		frac = float64(p.Bytes) / float64(p.Total)
	}
	return fmt.Sprintf("upload %s %3.0f%% %s / %s, %d parts, %s/s%s", bar(frac, 30), frac*100,
		humanBytes(p.Bytes), humanBytes(p.Total), p.Parts, humanBytes(int64(rate)), eta(float64(p.Total-p.Bytes), rate))
}

// loadLine describes a chunked job's progress; rate is records per second
// (zero when not known yet).
func loadLine(status client.Status, p *client.Progress, rate float64) string {
	bad := ""
	if p.BadRecords > 0 {
		bad = fmt.Sprintf(", %d bad", p.BadRecords)
	}
	if p.RecordsTotal == nil || *p.RecordsTotal <= 0 {
		return fmt.Sprintf("%s %d records loaded, %d chunks%s, %.0f records/s", status, p.RecordsLoaded, p.ChunksDone, bad, rate)
	}
	total := *p.RecordsTotal
	frac := float64(p.RecordsLoaded) / float64(total)
	return fmt.Sprintf("%s %s %3.0f%% %d / %d records, %d chunks%s, %.0f records/s%s", status, bar(frac, 30), frac*100,
		p.RecordsLoaded, total, p.ChunksDone, bad, rate, eta(float64(total-p.RecordsLoaded), rate))
}

// loadRate follows a chunked job's records per second between polls.
type loadRate struct {
	first   int64
	firstAt time.Time
	seen    bool
}

// rate records p at now and returns records per second since the first
// observation (zero until a later one shows progress).
func (r *loadRate) rate(p *client.Progress, now time.Time) float64 {
	if !r.seen {
		r.first, r.firstAt, r.seen = p.RecordsLoaded, now, true
		return 0
	}
	s := now.Sub(r.firstAt).Seconds()
	if s <= 0 {
		return 0
	}
	return float64(p.RecordsLoaded-r.first) / s
}
