package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/client"
)

// TestProgressLines: the upload and load lines show the bar, the share,
// the sizes or counts, the rate and an estimate when the total is known,
// and no bar when it is not.
func TestProgressLines(t *testing.T) {
	total := int64(1000)
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"upload half", uploadLine(client.UploadProgress{Bytes: 32 << 20, Sent: 32 << 20, Total: 64 << 20, Parts: 2}, 2*time.Second),
			"upload [###############...............]  50% 32.0 MiB / 64.0 MiB, 2 parts, 16.0 MiB/s eta 2s"},
		{"upload unknown total", uploadLine(client.UploadProgress{Bytes: 1500, Sent: 1500, Total: -1, Parts: 1}, time.Second),
			"upload 1.5 KiB sent, 1 parts, 1.5 KiB/s"},
		{"upload empty", uploadLine(client.UploadProgress{Total: 0}, 0),
			"upload [##############################] 100% 0 B / 0 B, 0 parts, 0 B/s"},
		{"load with total", loadLine(client.StatusRunning, &client.Progress{RecordsLoaded: 250, RecordsTotal: &total, ChunksDone: 5, BadRecords: 2}, 50),
			"RUNNING [########......................]  25% 250 / 1000 records, 5 chunks, 2 bad, 50 records/s eta 15s"},
		{"load without total", loadLine(client.StatusRunning, &client.Progress{RecordsLoaded: 250, ChunksDone: 5}, 0),
			"RUNNING 250 records loaded, 5 chunks, 0 records/s"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s:\n got %q\nwant %q", tt.name, tt.got, tt.want)
		}
	}
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 10 << 30: "10.0 GiB", 3 << 40: "3.0 TiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestMeterModes: plain writes one line per change; bar redraws one line
// in place and ends it with a newline; none writes nothing; auto is none
// for a writer that is not a terminal.
func TestMeterModes(t *testing.T) {
	var plain bytes.Buffer
	m := newMeter(&plain, progressPlain)
	for _, l := range []string{"a", "a", "b"} {
		m.show(l, false)
	}
	m.end()
	if plain.String() != "a\nb\n" {
		t.Fatalf("plain %q", plain.String())
	}
	var drawn bytes.Buffer
	m = newMeter(&drawn, progressBar)
	m.show("a", false)
	m.show("b", false) // within 100ms of a: not drawn
	m.show("c", true)
	m.end()
	if drawn.String() != "\r\x1b[Ka\r\x1b[Kc\n" {
		t.Fatalf("bar %q", drawn.String())
	}
	var none bytes.Buffer
	mode, ok := progressMode(progressAuto, &none)
	if !ok || mode != progressNone {
		t.Fatalf("auto on a buffer: %q %v", mode, ok)
	}
	m = newMeter(&none, mode)
	m.show("a", true)
	m.end()
	if none.Len() != 0 {
		t.Fatalf("none wrote %q", none.String())
	}
	if _, ok := progressMode("fancy", &none); ok {
		t.Fatal("an unknown mode was accepted")
	}
}

// TestResumeLine: the printed command repeats the flags that shape the
// parts and the job, quotes a path a shell would split, and names the
// input when it came from standard input.
func TestResumeLine(t *testing.T) {
	ue := &client.UploadError{UploadID: "0b9d5a7e-8c1f-4e53-9a51-2f7c6a1d3e40", Key: "mightyetl-abc"}
	got := resumeLine(payloadOptions{file: "my data/big.jsonl", maxBadRecords: 3, partSize: 65536, gzip: true}, ue)
	want := "etlctl jobs submit --file 'my data/big.jsonl' --resume 0b9d5a7e-8c1f-4e53-9a51-2f7c6a1d3e40 --key mightyetl-abc --max-bad-records 3 --part-size 65536 --gzip"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	got = resumeLine(payloadOptions{format: "json-array"}, ue)
	if !strings.HasSuffix(got, "--format json-array < (the same input)") || strings.Contains(got, "--file") {
		t.Fatalf("stdin: %q", got)
	}
}

// TestPayloadFormat: --format wins; else .jsonl and .ndjson are JSON Lines
// and anything else a JSON array.
func TestPayloadFormat(t *testing.T) {
	for _, tt := range []struct {
		flag, file string
		want       client.UploadFormat
		ok         bool
	}{
		{"", "big.jsonl", client.FormatJSONLines, true},
		{"", "BIG.NDJSON", client.FormatJSONLines, true},
		{"", "batch.json", client.FormatJSONArray, true},
		{"", "", client.FormatJSONArray, true},
		{"jsonl", "batch.json", client.FormatJSONLines, true},
		{"json-array", "big.jsonl", client.FormatJSONArray, true},
		{"csv", "x", "", false},
	} {
		if got, ok := payloadFormat(tt.flag, tt.file); got != tt.want || ok != tt.ok {
			t.Errorf("payloadFormat(%q, %q) = %q, %v", tt.flag, tt.file, got, ok)
		}
	}
}

// TestResumable: an interrupted upload is worth resuming unless it is gone,
// expired, too large or not the source's.
func TestResumable(t *testing.T) {
	wrap := func(err error) error { return &client.UploadError{UploadID: "u", Err: err} }
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{wrap(context.Canceled), true},
		{wrap(&client.Error{Code: client.CodeUploadDigestMismatch, Status: 400}), true},
		{wrap(&client.Error{Code: client.CodeTargetUnavailable, Status: 503}), true},
		{wrap(&client.Error{Code: client.CodeUploadExpired, Status: 410}), false},
		{wrap(&client.Error{Code: client.CodeUploadNotFound, Status: 404}), false},
		{wrap(&client.Error{Code: client.CodeUploadTooLarge, Status: 413}), false},
		{wrap(fmt.Errorf("part 9: %w", client.ErrUploadSourceMismatch)), false},
	} {
		if got := resumable(tt.err); got != tt.want {
			t.Errorf("resumable(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
