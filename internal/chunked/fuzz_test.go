package chunked_test

import (
	"fmt"
	"testing"

	"github.com/mightyetl/mightyetl/internal/chunked"
)

// FuzzReaderResumes: for any payload, cut into parts anywhere and read in
// any step, the Reader never panics, and reading from any checkpoint it
// gave yields exactly the records (and the error) it read after it.
func FuzzReaderResumes(f *testing.F) {
	f.Add([]byte("{\"id\":\"a\"}\n\n{\"id\":\"b\"}"), false, uint8(3), uint8(2))
	f.Add([]byte(" [ {\"id\":\"a\"} ,{\"s\":\"]}\\\"\"}, 1 ,[2]]"), true, uint8(5), uint8(1))
	f.Add([]byte("[{\"a\":[}]"), true, uint8(1), uint8(7))
	f.Fuzz(func(t *testing.T, payload []byte, array bool, cut, step uint8) {
		format := chunked.FormatJSONL
		if array {
			format = chunked.FormatJSONArray
		}
		var cuts []int
		if c := int(cut); c > 0 && c < len(payload) {
			cuts = append(cuts, c)
			if 2*c < len(payload) {
				cuts = append(cuts, 2*c)
			}
		}
		parts := split(string(payload), cuts...)
		st := max(int(step), 1)
		recs, cps, err := readAll(t, parts, format, chunked.Start, 16, st)
		for i, cp := range cps {
			rest, _, rerr := readAll(t, parts, format, cp, 16, st)
			if fmt.Sprint(rest) != fmt.Sprint(recs[i+1:]) || fmt.Sprint(rerr) != fmt.Sprint(err) {
				t.Fatalf("from checkpoint %d %+v: %v (%v), want %v (%v)", i, cp, rest, rerr, recs[i+1:], err)
			}
		}
	})
}
