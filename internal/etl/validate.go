package etl

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// Validate reports whether Process would accept body: it returns exactly the
// *Error Process returns, or nil when Process would return rows, without
// building the rows (no Data, no Normalized). It is the check of a durable
// submission, whose records are transformed later by the worker. Safe for
// concurrent use.
func Validate(body []byte, maxRecords int) error {
	records, err := ParseBatch(body, maxRecords)
	if err != nil {
		return err
	}
	for i, rec := range records {
		for _, f := range rec.Fields {
			if !validValue(isAmountKey(f.Name), f.Value) {
				return invalidRecord(i)
			}
		}
	}
	return nil
}

// isAmountKey reports whether strings.ToUpper(name) is "AMOUNT", without
// building the upper-case name when name is ASCII.
func isAmountKey(name string) bool {
	for i := 0; i < len(name); i++ {
		if name[i] >= utf8.RuneSelf {
			return strings.ToUpper(name) == "AMOUNT"
		}
	}
	return len(name) == len("AMOUNT") && strings.EqualFold(name, "AMOUNT")
}

// validValue reports whether transformValue accepts raw under a key that is
// (amount) or is not AMOUNT; NAME and EMAIL only change the case of a string,
// which cannot fail.
func validValue(amount bool, raw json.RawMessage) bool {
	if len(raw) == 0 {
		return false
	}
	switch raw[0] {
	case 'n':
		return string(raw) == "null"
	case 't', 'f':
		return !amount && (string(raw) == "true" || string(raw) == "false")
	case '"':
		if !amount && plainString(raw) {
			return true // decodeString would copy it and find no NUL
		}
		s, ok := decodeString(raw)
		if !ok || strings.IndexByte(s, 0) >= 0 {
			return false
		}
		if amount {
			_, ok = normalizeAmount(s, false)
		}
		return ok
	case '{', '[':
		if amount {
			return false
		}
		var b bytes.Buffer
		return json.Compact(&b, raw) == nil && !hasNUL(b.Bytes())
	default: // number
		if amount {
			_, ok := normalizeAmount(string(raw), true)
			return ok
		}
		return json.Valid(raw)
	}
}

// plainString reports whether raw is a string literal that decodeString
// takes on its fast path and accepts: no escape, no inner quote, no control
// byte.
func plainString(raw json.RawMessage) bool {
	if len(raw) < 2 || raw[len(raw)-1] != '"' {
		return false
	}
	for _, c := range raw[1 : len(raw)-1] {
		if c < 0x20 || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
