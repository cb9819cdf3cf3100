package etl

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mightyetl/mightyetl/internal/codes"
)

// parseDiagnosticReference is the token-by-token parser ParseDiagnostic
// replaced (json.Decoder.Token took a sixth of the worker's CPU in the
// burndown); the two must give the same answer for every input.
func parseDiagnosticReference(body []byte, maxRecords int) (DiagnosticSpec, error) {
	bad := func() (DiagnosticSpec, error) { return DiagnosticSpec{}, &Error{Code: codes.InvalidJSON, Index: -1} }
	if !utf8.Valid(body) {
		return bad()
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return bad()
	}
	spec := DiagnosticSpec{Records: []byte("[]")}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		name, ok := tok.(string)
		if err != nil || !ok || seen[name] {
			return bad()
		}
		seen[name] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return bad()
		}
		switch name {
		case "durationMillis":
			n, err := strconv.ParseInt(string(raw), 10, 64)
			if err != nil || n < 0 || n > MaxDiagnosticDuration.Milliseconds() {
				return bad()
			}
			spec.Duration = time.Duration(n) * time.Millisecond
		case "records":
			if string(raw) != "null" {
				spec.Records = []byte(raw)
			}
		case "failWith":
			switch string(raw) {
			case "null":
			case `"` + FailWithTransient + `"`:
				spec.FailWith = FailWithTransient
			case `"` + FailWithPermanent + `"`:
				spec.FailWith = FailWithPermanent
			default:
				return bad()
			}
		default:
			return bad()
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return bad()
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return bad() // trailing data
	}
	if _, err := Process(spec.Records, maxRecords); err != nil {
		return DiagnosticSpec{}, err
	}
	return spec, nil
}

var diagnosticSeeds = []string{
	`{"durationMillis": 10, "records": [{"id":"a"}], "failWith": null}`,
	`{"durationMillis":0,"records":[],"failWith":null}`,
	`{"records": null}`, `{}`, ` { } `, "\t{\r\n\"records\" : [ ] }\n",
	`{"durationMillis": 1.5}`, `{"durationMillis": 86400000}`, `{"durationMillis": 86400001}`,
	`{"durationMillis": -1}`, `{"durationMillis": "1"}`, `{"durationMillis": 1e3}`, `{"durationMillis": 01}`,
	`{"failWith": "permanent"}`, `{"failWith": "transient"}`, `{"failWith": "\u0074ransient"}`, `{"failWith": 1}`,
	`{"records": {}}`, `{"records": [1]}`, `{"records": [{"id":"a"},{"id":"b"},{"id":"c"}]}`,
	`{} {}`, "\xff", `{"records": [{"id":"a","x":1,"x":2}]}`, `{"records": [{"id":"a\"}]"}]}`,
	`{"dur\u0061tionMillis": 5}`, `{"durationMillis": 5, "dur\u0061tionMillis": 6}`,
	`{"durationMillis": 5, "durationMillis": 5}`, `{"records": [], "records": []}`, `{"failWith": null, "failWith": null}`,
	`{"unknown": 1}`, `{"a\\b": 1}`, `[]`, `null`, `"x"`, `1`, ``, ` `, `{`, `{"records": [}`,
	`{"records": [{"id":"{[\\\"]}"}], "failWith": "permanent"}`,
}

func TestParseDiagnosticMatchesReference(t *testing.T) {
	for _, in := range diagnosticSeeds {
		compareDiagnostic(t, []byte(in))
	}
}

func FuzzParseDiagnosticMatchesReference(f *testing.F) {
	for _, in := range diagnosticSeeds {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, b []byte) { compareDiagnostic(t, b) })
}

func compareDiagnostic(t *testing.T, b []byte) {
	t.Helper()
	got, gotErr := ParseDiagnostic(b, 2)
	want, wantErr := parseDiagnosticReference(b, 2)
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("%q: error %v, reference %v", b, gotErr, wantErr)
	}
	if gotErr != nil {
		var g, w *Error
		if !errors.As(gotErr, &g) || !errors.As(wantErr, &w) || g.Code != w.Code || g.Index != w.Index {
			t.Fatalf("%q: error %v, reference %v", b, gotErr, wantErr)
		}
		return
	}
	if got.Duration != want.Duration || got.FailWith != want.FailWith || !bytes.Equal(got.Records, want.Records) {
		t.Fatalf("%q: %+v, reference %+v", b, got, want)
	}
}

func BenchmarkParseDiagnostic(b *testing.B) {
	body := []byte(`{"durationMillis":0,"records":[],"failWith":null}`)
	b.Run("walk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ParseDiagnostic(body, 1000); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reference", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := parseDiagnosticReference(body, 1000); err != nil {
				b.Fatal(err)
			}
		}
	})
}
