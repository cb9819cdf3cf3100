package etl

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/mightyetl/mightyetl/internal/codes"
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
	// when the member is absent or null); it shares the parsed body's bytes.
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
	bad := func() (DiagnosticSpec, error) { return DiagnosticSpec{}, &Error{Code: codes.InvalidJSON, Index: -1} }
	// json.Valid accepts exactly one JSON value with nothing after it, so the
	// walk below only splits a grammatical object into its members: the
	// worker parses every diagnostic payload, and json.Decoder.Token took a
	// sixth of its CPU in the burndown (parseDiagnosticReference in the
	// tests is that parser; FuzzParseDiagnosticMatchesReference holds the
	// two to the same answers).
	if !utf8.Valid(body) || !json.Valid(body) {
		return bad()
	}
	i := skipSpace(body, 0)
	if body[i] != '{' {
		return bad()
	}
	spec := DiagnosticSpec{Records: []byte("[]")}
	var seenDuration, seenRecords, seenFailWith bool
	i = skipSpace(body, i+1)
	for body[i] != '}' {
		keyEnd := valueEnd(body, i) // a member name: a string
		name, ok := memberName(body[i:keyEnd])
		if !ok {
			return bad()
		}
		i = skipSpace(body, skipSpace(body, keyEnd)+1) // past ':'
		end := valueEnd(body, i)
		raw := body[i:end]
		switch name {
		case "durationMillis":
			if seenDuration {
				return bad()
			}
			seenDuration = true
			n, err := strconv.ParseInt(string(raw), 10, 64)
			if err != nil || n < 0 || n > MaxDiagnosticDuration.Milliseconds() {
				return bad()
			}
			spec.Duration = time.Duration(n) * time.Millisecond
		case "records":
			if seenRecords {
				return bad()
			}
			seenRecords = true
			if string(raw) != "null" {
				spec.Records = raw
			}
		case "failWith":
			if seenFailWith {
				return bad()
			}
			seenFailWith = true
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
		i = skipSpace(body, end)
		if body[i] == ',' {
			i = skipSpace(body, i+1)
		}
	}
	if _, err := Process(spec.Records, maxRecords); err != nil {
		return DiagnosticSpec{}, err
	}
	return spec, nil
}

// skipSpace returns the index of the first non-whitespace byte of valid
// JSON b at or after i (len(b) when none).
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// valueEnd returns the index just past the JSON value that starts at b[i],
// for b already known valid (json.Valid).
func valueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		for i++; ; i++ {
			switch b[i] {
			case '\\':
				i++ // the escaped byte (a \u escape's hex digits are plain bytes)
			case '"':
				return i + 1
			}
		}
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch b[i] {
			case '"':
				i = valueEnd(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
	default: // number, true, false, null
		for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' &&
			b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
			i++
		}
		return i
	}
}

// memberName decodes a JSON string token (quotes included): escapes are
// rare in member names, so only a name with a backslash goes through the
// decoder.
func memberName(tok []byte) (string, bool) {
	if len(tok) < 2 || tok[0] != '"' {
		return "", false
	}
	if bytes.IndexByte(tok, '\\') < 0 {
		return string(tok[1 : len(tok)-1]), true
	}
	var s string
	if err := json.Unmarshal(tok, &s); err != nil {
		return "", false
	}
	return s, true
}
