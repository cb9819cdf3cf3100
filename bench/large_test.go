package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"testing"
	"testing/iotest"
	"time"

	"github.com/mightyetl/mightyetl/internal/etl"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// TestLargeRowsMatchTransform: the COPY baseline's rows are exactly what
// the product's transform makes of the generated records, so the baseline
// loads the same rows as the worker.
func TestLargeRowsMatchTransform(t *testing.T) {
	for _, i := range []int{1, 9, 10, 99_999, 100_000, 100_001, 1_234_567, 10_000_000} {
		line := appendLargeRecord(nil, i)
		if line[len(line)-1] != '\n' || bytes.Count(line, []byte("\n")) != 1 {
			t.Fatalf("record %d is not one line: %q", i, line)
		}
		rows, err := etl.Process(append(append([]byte("["), line[:len(line)-1]...), ']'), 1)
		if err != nil || len(rows) != 1 {
			t.Fatalf("record %d: transform: %v (%d rows)", i, err, len(rows))
		}
		data, norm := appendLargeRow(nil, nil, i)
		if string(data) != rows[0].Data || string(norm) != string(rows[0].Normalized) {
			t.Errorf("record %d: baseline row (%s, %s), transform (%s, %s)", i, data, norm, rows[0].Data, rows[0].Normalized)
		}
	}
}

// TestLargeStreamIsTheRecords: the generated payload read in odd pieces is
// records 1..n, one a line, in order.
func TestLargeStreamIsTheRecords(t *testing.T) {
	const n = 2_500
	b, err := io.ReadAll(iotest.OneByteReader(io.LimitReader(newLargeStream(n), 1<<30)))
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	for i := 1; i <= n; i++ {
		want = appendLargeRecord(want, i)
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("stream of %d bytes differs from the %d bytes of the records", len(b), len(want))
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	lines := 0
	for sc.Scan() {
		lines++
	}
	if lines != n {
		t.Fatalf("%d lines, want %d", lines, n)
	}
	if k, err := newLargeStream(0).Read(make([]byte, 8)); k != 0 || err != io.EOF {
		t.Fatalf("empty stream read (%d, %v), want (0, EOF)", k, err)
	}
}

// TestLargeSmoke runs the large scenario with a small job (20,000 records
// in parts of 256 KiB, so records span parts; chunks of 500 records; a 5 s
// lease so the crash run's second worker takes over soon) on the test
// server, in a database of its own, and checks what the figures claim:
// every record visible once after the uncrashed and the crashed run, the
// crashed run resumed from a checkpoint the killed worker committed, and
// the COPY baseline and ratios are there. The real figures come from the
// documented runs (docs/performance.md, "Large jobs").
func TestLargeSmoke(t *testing.T) {
	server := pgtest.ServerURL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	url, err := withDatabaseName(server, "mightyetl_bench_large_"+hex.EncodeToString(b[:]))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := dropDatabase(ctx, url); err != nil {
			t.Logf("drop smoke database: %v", err)
		}
	})
	const n = 8_000
	o := options{Scenarios: []string{"large"}, DatabaseURL: url, out: io.Discard,
		Large: largeOptions{N: n, PartBytes: 256 << 10, Crash: true, Lease: 5 * time.Second, ChunkRecords: 200, Timeout: 2 * time.Minute}}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := execute(ctx, o, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("bench: %v", err)
	}
	seen := map[string]bool{}
	for _, r := range rep.Results {
		seen[r.Variant] = true
		m := r.Metrics
		positive := func(keys ...string) {
			t.Helper()
			for _, k := range keys {
				if v, ok := m[k]; !ok || !(v > 0) {
					t.Errorf("%s: %s = %v, want > 0 (%v)", r.Variant, k, v, m)
				}
			}
		}
		switch r.Variant {
		case "copy/round=1", "copy/round=2":
			positive("records_per_s", "wal_bytes_per_record")
			if m["records"] != n {
				t.Errorf("%s: %v records copied, want %d", r.Variant, m["records"], n)
			}
		case "end-to-end", "crash":
			positive("records_per_s", "load_records_per_s", "upload_s", "worker_rss_peak_mib", "intake_rss_peak_mib", "load_wal_bytes_per_record")
			if m["visible_rows"] != n || m["duplicate_rows"] != 0 || m["records_loaded"] != n {
				t.Errorf("%s: %v visible rows, %v duplicates, %v loaded; want %d, 0, %d", r.Variant, m["visible_rows"], m["duplicate_rows"], m["records_loaded"], n, n)
			}
			if m["parts"] < 2 {
				t.Errorf("%s: %v parts, want several (records spanning parts)", r.Variant, m["parts"])
			}
			if r.Variant == "crash" {
				t.Logf("crash: seen %v before the kill, resumed from %v, attempt %v, finished before the kill %v",
					m["records_loaded_seen_before_kill"], m["resumed_from_records_loaded"], m["attempt_after_resume"], m["finished_before_kill"])
			}
			if r.Variant == "crash" && m["finished_before_kill"] == 0 {
				// Resumed from what the killed worker committed: at least
				// what was seen before the kill, short of the whole job, on
				// the second attempt.
				if from := m["resumed_from_records_loaded"]; from < m["records_loaded_seen_before_kill"] || from >= n || m["attempt_after_resume"] != 2 {
					t.Errorf("crash: resumed from %v (seen %v before the kill), attempt %v", from, m["records_loaded_seen_before_kill"], m["attempt_after_resume"])
				}
			}
		case "summary":
			positive("ratio_end_to_end_vs_copy", "ratio_load_vs_copy", "load_wal_bytes_per_record_ratio_vs_copy", "ratio_crash_vs_uncrashed_total_time")
		default:
			t.Errorf("unexpected variant %q", r.Variant)
		}
	}
	for _, v := range []string{"copy/round=1", "end-to-end", "crash", "copy/round=2", "summary"} {
		if !seen[v] {
			t.Errorf("no %s result", v)
		}
	}
}
