package console

import (
	"strconv"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/pg"
)

// TestProgressView: the bar (records when the total is known, else bytes,
// else indeterminate), the rate between the last two checkpoints seen or
// on average since submission, the estimate of the time left (only with
// a total, a rate and a live job), and the observations the next refresh
// sends.
func TestProgressView(t *testing.T) {
	created := time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC)
	at := func(s int) *time.Time { x := created.Add(time.Duration(s) * time.Second); return &x }
	n := func(v int64) *int64 { return &v }
	base := pg.OpsProgress{Progress: pg.Progress{RecordsLoaded: 3990, BadRecords: 10, ChunksDone: 4, PayloadBytes: 1 << 20,
		RecordsTotal: n(10000), LastCheckpointAt: at(100)}, CreatedAt: created, BytesDone: n(300000), LoadState: "LOADING"}

	// First rendering: the average since submission, 4000 records in 100 s.
	v := newProgressView(base, pg.StatusRunning, nil)
	if v.Unit != "records" || v.Max != 10000 || v.Value != 4000 || v.Percent() != "40.0%" || !v.Live {
		t.Errorf("bar %+v %s", v, v.Percent())
	}
	if v.RateText() != "40.0 records/s" || v.RateBasis != "on average since submission" || !v.HasLeft || v.Left != 150*time.Second {
		t.Errorf("since submission: %s %s %v %v", v.RateText(), v.RateBasis, v.HasLeft, v.Left)
	}
	if v.Seen != "4000:"+itoa64(at(100).UnixMicro()) {
		t.Errorf("seen %q", v.Seen)
	}
	// A refresh that saw the checkpoint at 90 s with 3000 done: 100 records/s
	// between the two, 60 s left.
	seen := parseSeen("3000:" + itoa64(at(90).UnixMicro()))
	v = newProgressView(base, pg.StatusRunning, seen)
	if v.RateText() != "100 records/s" || v.RateBasis != "between the last two checkpoints seen" || v.Left != time.Minute {
		t.Errorf("between checkpoints: %s %s %v", v.RateText(), v.RateBasis, v.Left)
	}
	if want := "4000:" + itoa64(at(100).UnixMicro()) + ",3000:" + itoa64(at(90).UnixMicro()); v.Seen != want {
		t.Errorf("seen %q, want %q", v.Seen, want)
	}
	// No new checkpoint since: the same two observations, the same rate.
	again := newProgressView(base, pg.StatusRunning, parseSeen(v.Seen))
	if again.RateText() != "100 records/s" || again.Seen != v.Seen {
		t.Errorf("no new checkpoint: %s %q", again.RateText(), again.Seen)
	}
	// Observations that cannot be this load's (later, or ahead of it) and
	// malformed ones are ignored.
	junk := parseSeen("5000:" + itoa64(at(95).UnixMicro()) + ",x:1,1:" + itoa64(at(200).UnixMicro()))
	if v := newProgressView(base, pg.StatusRunning, junk); v.RateBasis != "on average since submission" {
		t.Errorf("junk: %s", v.RateBasis)
	}
	// Without a total: the bar counts bytes, no estimate.
	noTotal := base
	noTotal.RecordsTotal = nil
	v = newProgressView(noTotal, pg.StatusRunning, nil)
	if v.Unit != "bytes" || v.Max != 1<<20 || v.Value != 300000 || v.HasLeft || v.Percent() != "28.6%" {
		t.Errorf("bytes bar %+v %s", v, v.Percent())
	}
	// Without total and byte position: an indeterminate bar.
	noTotal.BytesDone = nil
	if v := newProgressView(noTotal, pg.StatusRunning, nil); v.Max != 0 || v.Percent() != "" || v.Unit != "" {
		t.Errorf("indeterminate %+v", v)
	}
	// Before the first checkpoint: no rate, no estimate, nothing seen.
	fresh := base
	fresh.RecordsLoaded, fresh.BadRecords, fresh.LastCheckpointAt = 0, 0, nil
	if v := newProgressView(fresh, pg.StatusPending, nil); v.RateText() != "" || v.HasLeft || v.Seen != "" || v.Value != 0 || !v.Live {
		t.Errorf("fresh %+v", v)
	}
	// Terminal: full bar on success, never an estimate, not live.
	if v := newProgressView(base, pg.StatusSucceeded, nil); v.Value != v.Max || v.HasLeft || v.Live || v.RateText() == "" {
		t.Errorf("succeeded %+v", v)
	}
	if v := newProgressView(base, pg.StatusFailed, nil); v.Value != 4000 || v.HasLeft || v.Live {
		t.Errorf("failed %+v", v)
	}
}

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

func TestNumberTexts(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := group(n); got != want {
			t.Errorf("group(%d) = %q, want %q", n, got, want)
		}
	}
	for n, want := range map[int64]string{512: "512 bytes", 1536: "1.5 KiB (1,536 bytes)", 10 << 30: "10.0 GiB (10,737,418,240 bytes)"} {
		if got := bytesText(n); got != want {
			t.Errorf("bytesText(%d) = %q, want %q", n, got, want)
		}
	}
	for d, want := range map[time.Duration]string{1500 * time.Millisecond: "2s", 25*time.Minute + 31*time.Second: "26m0s", 30*time.Hour + 20*time.Minute: "30h0m0s"} {
		if got := roundLeft(d).String(); got != want {
			t.Errorf("roundLeft(%v) = %s, want %s", d, got, want)
		}
	}
	if got := (progressView{OpsProgress: pg.OpsProgress{Progress: pg.Progress{FailedRecordNumber: func() *int64 { v := int64(12345); return &v }()}}}).FailedRecord(); got != "12,345" {
		t.Errorf("failed record %q", got)
	}
}
