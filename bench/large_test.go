package main

import (
	"bufio"
	"bytes"
	"io"
	"testing"
	"testing/iotest"

	"github.com/mightyetl/mightyetl/internal/etl"
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
