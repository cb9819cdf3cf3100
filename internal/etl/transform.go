package etl

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Row is the transformed form of one record, ready for the target table.
type Row struct {
	// RecordID is the record's id, unchanged.
	RecordID string
	// Data is the concatenation of "KEY:value," over the record's fields in input order,
	// trailing comma kept, e.g. "ID:a1,NAME:JANE,AMOUNT:999.90,".
	Data string
	// Normalized is a JSON object of the upper-cased keys, in input order, to the transformed
	// values (see Transform).
	Normalized []byte
}

// Transform turns records (as returned by ParseBatch) into rows, one per record in the same
// order. For each field, in input order, the key is strings.ToUpper(name) and the value is:
//
//   - null: the text "null" (JSON null in Normalized), for every key including AMOUNT;
//   - AMOUNT (non-null): a JSON number, or a JSON string holding a plain decimal such as
//     "999.9" or "-12" (no exponent), rounded half-up (ties away from zero) to exactly two
//     decimal places, e.g. "999.90"; a JSON string in Normalized. Anything else, more than
//     MaxAmountDigits significant digits, or an absolute value of 1e18 or more after rounding
//     rejects the record;
//   - a string: its decoded text, upper-cased (strings.ToUpper) for NAME and lower-cased
//     (strings.ToLower) for EMAIL; a JSON string in Normalized;
//   - a number or boolean: its JSON text unchanged (also for NAME and EMAIL), keeping its JSON
//     type in Normalized;
//   - an object or array: its compact JSON (json.Compact), embedded as JSON in Normalized.
//
// A value that would contain U+0000 (in a string, or in a nested string or member name) also
// rejects the record: PostgreSQL text and jsonb cannot store it. A rejection is an *Error with
// codes.InvalidRecord and the record's index; no rows are returned then. Transform is pure and
// safe for concurrent use.
func Transform(records []Record) ([]Row, error) {
	rows := make([]Row, 0, len(records))
	var data strings.Builder
	var norm bytes.Buffer
	for i, rec := range records {
		data.Reset()
		norm.Reset()
		norm.WriteByte('{')
		for j, f := range rec.Fields {
			key := strings.ToUpper(f.Name)
			text, jsonValue, ok := transformValue(key, f.Value)
			if !ok {
				return nil, invalidRecord(i)
			}
			data.WriteString(key)
			data.WriteByte(':')
			data.WriteString(text)
			data.WriteByte(',')
			if j > 0 {
				norm.WriteByte(',')
			}
			appendJSONString(&norm, key)
			norm.WriteByte(':')
			norm.Write(jsonValue)
		}
		norm.WriteByte('}')
		rows = append(rows, Row{
			RecordID:   rec.ID,
			Data:       data.String(),
			Normalized: bytes.Clone(norm.Bytes()),
		})
	}
	return rows, nil
}

// transformValue returns the data text and the Normalized JSON of one field value.
func transformValue(key string, raw json.RawMessage) (text string, jsonValue []byte, ok bool) {
	if len(raw) == 0 {
		return "", nil, false
	}
	switch raw[0] {
	case 'n':
		if string(raw) != "null" {
			return "", nil, false
		}
		return "null", raw, true
	case 't', 'f':
		if key == "AMOUNT" || (string(raw) != "true" && string(raw) != "false") {
			return "", nil, false
		}
		return string(raw), raw, true
	case '"':
		s, ok := decodeString(raw)
		if !ok || strings.IndexByte(s, 0) >= 0 {
			return "", nil, false
		}
		switch key {
		case "AMOUNT":
			if s, ok = normalizeAmount(s, false); !ok {
				return "", nil, false
			}
		case "NAME":
			s = strings.ToUpper(s)
		case "EMAIL":
			s = strings.ToLower(s)
		}
		var b bytes.Buffer
		appendJSONString(&b, s)
		return s, b.Bytes(), true
	case '{', '[':
		if key == "AMOUNT" {
			return "", nil, false
		}
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err != nil || hasNUL(b.Bytes()) {
			return "", nil, false
		}
		return b.String(), b.Bytes(), true
	default: // number
		if key == "AMOUNT" {
			s, ok := normalizeAmount(string(raw), true)
			if !ok {
				return "", nil, false
			}
			return s, []byte(`"` + s + `"`), true
		}
		if !json.Valid(raw) {
			return "", nil, false
		}
		return string(raw), raw, true
	}
}

// decodeString decodes a raw JSON string, without allocation beyond the result when it holds
// no escapes.
func decodeString(raw json.RawMessage) (string, bool) {
	if len(raw) >= 2 && raw[len(raw)-1] == '"' && bytes.IndexByte(raw[1:len(raw)-1], '\\') < 0 &&
		bytes.IndexByte(raw[1:len(raw)-1], '"') < 0 {
		for _, c := range raw[1 : len(raw)-1] {
			if c < 0x20 {
				return "", false
			}
		}
		return string(raw[1 : len(raw)-1]), true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// hasNUL reports whether compact JSON holds U+0000 in a string or member name. The cheap
// byte search is exact only without escaped backslashes, so a hit is confirmed by decoding.
func hasNUL(compact []byte) bool {
	if !bytes.Contains(compact, []byte(`\u0000`)) {
		return false
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(compact))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return true
	}
	return anyNUL(v)
}

func anyNUL(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.IndexByte(v, 0) >= 0
	case []any:
		for _, e := range v {
			if anyNUL(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range v {
			if strings.IndexByte(k, 0) >= 0 || anyNUL(e) {
				return true
			}
		}
	}
	return false
}

// appendJSONString writes s (valid UTF-8) as a JSON string, escaping only what JSON requires
// (no HTML escaping, so Normalized stays readable).
func appendJSONString(b *bytes.Buffer, s string) {
	b.Write(appendJSONStringBytes(b.AvailableBuffer(), s))
}

// appendJSONStringBytes appends s as appendJSONString writes it.
func appendJSONStringBytes(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, `\n`...)
		case '\r':
			dst = append(dst, `\r`...)
		case '\t':
			dst = append(dst, `\t`...)
		default:
			dst = append(dst, `\u00`...)
			dst = append(dst, hex[c>>4], hex[c&0xF])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// ResponseText is the text/plain body of the synchronous path and the ledger: one line
// "Processed: <id>" per row, joined with "\n", no trailing newline ("" for no rows).
func ResponseText(rows []Row) string {
	var b strings.Builder
	for i, r := range rows {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString("Processed: ")
		b.WriteString(r.RecordID)
	}
	return b.String()
}

// Process is ParseBatch followed by Transform: it validates and transforms a whole request
// body, returning the rows or the first *Error. Safe for concurrent use.
func Process(body []byte, maxRecords int) ([]Row, error) {
	records, err := ParseBatch(body, maxRecords)
	if err != nil {
		return nil, err
	}
	return Transform(records)
}
