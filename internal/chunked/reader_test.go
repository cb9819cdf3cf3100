package chunked_test

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/chunked"
)

// partSource serves parts like pg.PayloadReader: each Read returns at most
// step bytes of one part, and Position the part and offset after them.
type partSource struct {
	parts        [][]byte
	part         int // 0-based index of the current part
	off          int
	step         int
	posPart, pos int64
}

func newPartSource(parts [][]byte, from chunked.Position, step int) *partSource {
	return &partSource{parts: parts, part: int(from.Part - 1), off: int(from.Offset), step: step,
		posPart: from.Part, pos: from.Offset}
}

func (s *partSource) Read(p []byte) (int, error) {
	for s.part < len(s.parts) && s.off >= len(s.parts[s.part]) {
		s.part++
		s.off = 0
	}
	if s.part >= len(s.parts) {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), s.step)], s.parts[s.part][s.off:])
	s.off += n
	s.posPart, s.pos = int64(s.part+1), int64(s.off)
	return n, nil
}

func (s *partSource) Position() (int64, int64) { return s.posPart, s.pos }

// split cuts payload into parts at the given offsets.
func split(payload string, cuts ...int) [][]byte {
	var parts [][]byte
	prev := 0
	for _, c := range cuts {
		parts = append(parts, []byte(payload[prev:c]))
		prev = c
	}
	return append(parts, []byte(payload[prev:]))
}

type got struct {
	num      int64
	raw      string
	tooLarge bool
}

// readAll reads every record from `from`, and the checkpoint after each.
func readAll(t *testing.T, parts [][]byte, format string, from chunked.Position, bound, step int) ([]got, []chunked.Position, error) {
	t.Helper()
	rd := chunked.NewReader(newPartSource(parts, from, step), format, from, bound)
	var out []got
	var cps []chunked.Position
	for {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return out, cps, nil
		}
		if err != nil {
			return out, cps, err
		}
		out = append(out, got{rec.Number, string(rec.Raw), rec.TooLarge})
		cps = append(cps, rd.Checkpoint())
	}
}

// The checkpoint taken after the end was read (what a load's last chunk
// commits) resumes to nothing more.
func TestReaderCheckpointAfterTheEndResumesToTheEnd(t *testing.T) {
	for _, tc := range []struct{ format, payload string }{
		{chunked.FormatJSONL, "{\"id\":\"a\"}\n\n \n"},
		{chunked.FormatJSONArray, "[{\"id\":\"a\"} ,\n{\"id\":\"b\"}\n] \n"},
	} {
		parts := split(tc.payload, 3)
		rd := chunked.NewReader(newPartSource(parts, chunked.Start, 2), tc.format, chunked.Start, 100)
		for {
			if _, err := rd.Next(); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
		}
		cp := rd.Checkpoint()
		rest, _, err := readAll(t, parts, tc.format, cp, 100, 2)
		if err != nil || len(rest) != 0 {
			t.Fatalf("%s from the final checkpoint %+v: %v %v", tc.format, cp, rest, err)
		}
	}
}

func TestReaderResumesAtEveryCheckpoint(t *testing.T) {
	long := strings.Repeat("x", 300)
	jsonl := "{\"id\":\"a\"}\n\n  \n{\"id\":\"b\",\"s\":\"[}\\\"\"}\r\n{\"id\":\"" + long + "\"}\n{\"id\":\"c\"}"
	array := " [ {\"id\":\"a\"} ,{\"id\":\"b\",\"s\":\"]}\\\"\"},\n{\"id\":\"" + long + "\"}, 12 ,\"s\", [1,{\"x\":[]}] ,{\"id\":\"c\"}\n] \n"
	cases := []struct {
		name, format, payload string
		want                  []got
	}{
		{"jsonl", chunked.FormatJSONL, jsonl, []got{
			{1, `{"id":"a"}`, false}, {4, "{\"id\":\"b\",\"s\":\"[}\\\"\"}\r", false}, {5, "", true}, {6, `{"id":"c"}`, false}}},
		{"array", chunked.FormatJSONArray, array, []got{
			{1, `{"id":"a"}`, false}, {2, "{\"id\":\"b\",\"s\":\"]}\\\"\"}", false}, {3, "", true}, {4, "12", false},
			{5, `"s"`, false}, {6, `[1,{"x":[]}]`, false}, {7, `{"id":"c"}`, false}}},
	}
	for _, tc := range cases {
		for _, cuts := range [][]int{nil, {1}, {5, 17}, {3, 4, 5, 40, 200, len(tc.payload) - 1}} {
			for _, step := range []int{1, 7, 1 << 20} {
				t.Run(fmt.Sprintf("%s/cuts%v/step%d", tc.name, cuts, step), func(t *testing.T) {
					parts := split(tc.payload, cuts...)
					recs, cps, err := readAll(t, parts, tc.format, chunked.Start, 100, step)
					if err != nil {
						t.Fatal(err)
					}
					if fmt.Sprint(recs) != fmt.Sprint(tc.want) {
						t.Fatalf("records %v, want %v", recs, tc.want)
					}
					// Resuming at each checkpoint reads exactly the rest.
					for i, cp := range cps {
						rest, _, err := readAll(t, parts, tc.format, cp, 100, step)
						if err != nil {
							t.Fatalf("from checkpoint %d %+v: %v", i, cp, err)
						}
						if fmt.Sprint(rest) != fmt.Sprint(tc.want[i+1:]) {
							t.Fatalf("from checkpoint %d %+v: %v, want %v", i, cp, rest, tc.want[i+1:])
						}
					}
				})
			}
		}
	}
}

func TestReaderRejectsABrokenArray(t *testing.T) {
	for _, tc := range []struct {
		payload string
		record  int64
	}{
		{`{"id":"a"}`, 1},
		{`[{"id":"a"} {"id":"b"}]`, 2},
		{`[{"id":"a"},]`, 2},
		{`[{"id":"a"},{"id":"b"]`, 2},
		{`[{"id":"a"}`, 2},
		{`[{"id":"a"}] x`, 2},
		{`[{"id":"a"},{"id":"b`, 2},
		{``, 1},
	} {
		_, _, err := readAll(t, split(tc.payload), chunked.FormatJSONArray, chunked.Start, 100, 3)
		var se *chunked.StructureError
		if !errors.As(err, &se) || se.Record != tc.record {
			t.Errorf("%q: %v, want a structure error at record %d", tc.payload, err, tc.record)
		}
	}
	recs, _, err := readAll(t, split(" [ ] "), chunked.FormatJSONArray, chunked.Start, 100, 3)
	if err != nil || len(recs) != 0 {
		t.Fatalf("empty array: %v %v", recs, err)
	}
}
