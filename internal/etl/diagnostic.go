package etl

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"time"
	"unicode/utf8"
)

// Diagnostic failure modes (DiagnosticSpec.FailWith).
const (
	FailWithTransient = "transient"
	FailWithPermanent = "permanent"
)

// MaxDiagnosticDuration bounds durationMillis (24 h).
const MaxDiagnosticDuration = 24 * time.Hour

// DiagnosticSpec is a validated diagnostic job request.
type DiagnosticSpec struct {
	// Duration is how long the handler waits before finishing.
	Duration time.Duration
	// Records is the raw JSON array of records, exactly as submitted ("[]"
	// when the member is absent or null).
	Records []byte
	// FailWith is "", FailWithTransient or FailWithPermanent.
	FailWith string
}

// ParseDiagnostic validates a diagnostic job's payload, for the intake at
// submission and for the worker that runs it: a body
// {"durationMillis": 0..86400000, "records": [...], "failWith": null|"transient"|"permanent"}
// (every member optional; durationMillis defaults to 0, records to []).
// The records are validated and transformed with the same rules as an ETL
// job (Process with maxRecords), so an invalid record fails at
// submission, not in the worker. It fails with an *Error:
// etl_invalid_json when the body is not UTF-8 JSON holding one object, repeats
// or does not know a member, or a member has the wrong type or range; the
// records' own etl_invalid_json, etl_invalid_record or etl_batch_too_large
// otherwise. Safe for concurrent use.
func ParseDiagnostic(body []byte, maxRecords int) (DiagnosticSpec, error) {
	bad := func() (DiagnosticSpec, error) { return DiagnosticSpec{}, &Error{Code: CodeInvalidJSON, Index: -1} }
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
