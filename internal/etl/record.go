package etl

import (
	"strings"
	"unicode/utf8"
)

// AppendRecord transforms one record exactly as Process transforms the
// one-element batch "[" + raw + "]" with maxRecords 1, appending the row's
// Data text to data and its Normalized JSON to norm. raw is one record as a
// chunked payload holds it (a line of JSON Lines, one element of a JSON
// array). On a rejection it returns Process's *Error, and data and norm as
// given (nothing appended); a raw that holds no record (white space, which
// Process takes as an empty batch) is codes.InvalidRecord at index 0. It
// never keeps raw, data or norm and is safe for concurrent use on distinct
// buffers.
//
// The common record (a flat object whose member names are ASCII without
// escapes and whose values are strings without escapes, numbers, true,
// false or null) is transformed in one pass with no allocation beyond the
// buffers' growth; anything else, every rejection included, goes through
// Process itself. FuzzAppendRecord pins that both give the same bytes and
// the same error.
func AppendRecord(data, norm, raw []byte) ([]byte, []byte, error) {
	if d, n, ok := appendFlatRecord(data, norm, raw); ok {
		return d, n, nil
	}
	body := make([]byte, 0, len(raw)+2)
	body = append(append(append(body, '['), raw...), ']')
	rows, err := Process(body, 1)
	if err != nil {
		return data, norm, err
	}
	if len(rows) == 0 {
		return data, norm, invalidRecord(0)
	}
	return append(data, rows[0].Data...), append(norm, rows[0].Normalized...), nil
}

// flatMaxFields is the most members appendFlatRecord handles (more go
// through Process; the duplicate check is a scan of this many).
const flatMaxFields = 16

// flatField is one member of a flat record: its name and value as byte
// ranges of the record.
type flatField struct {
	nameStart, nameEnd   int // the name without its quotes
	valueStart, valueEnd int // the value as written (a string with its quotes)
}

// appendFlatRecord is AppendRecord's one-pass path. It reports false, with
// data and norm as given, for anything it does not take: not UTF-8, not one
// object, a member name that is not ASCII or holds an escape, a value that
// is an object, an array or a string with an escape, more than
// flatMaxFields members, and every record Process would reject. What it
// takes it checks as json.Valid and ParseBatch do (the number grammar, the
// literals, the id, the names, two names equal after strings.ToUpper) and
// transforms as Transform does.
func appendFlatRecord(data, norm, raw []byte) ([]byte, []byte, bool) {
	if !utf8.Valid(raw) {
		return data, norm, false
	}
	var fields [flatMaxFields]flatField
	n := 0
	hasID := false
	i := skipJSONSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return data, norm, false
	}
	i = skipJSONSpace(raw, i+1)
	for {
		// A member: "name" : value.
		if i >= len(raw) || raw[i] != '"' || n == flatMaxFields {
			return data, norm, false
		}
		f := flatField{nameStart: i + 1}
		i++
		for ; i < len(raw) && raw[i] != '"'; i++ {
			if c := raw[i]; c < 0x20 || c >= 0x7f || c == '\\' || c == ':' || c == ',' {
				// Not ASCII, an escape, or a name ParseBatch rejects (or
				// that is not JSON): Process decides.
				return data, norm, false
			}
		}
		if i >= len(raw) || i == f.nameStart {
			return data, norm, false
		}
		f.nameEnd = i
		i = skipJSONSpace(raw, i+1)
		if i >= len(raw) || raw[i] != ':' {
			return data, norm, false
		}
		i = skipJSONSpace(raw, i+1)
		f.valueStart = i
		if i = scanFlatValue(raw, i); i < 0 {
			return data, norm, false
		}
		f.valueEnd = i
		name := raw[f.nameStart:f.nameEnd]
		for _, g := range fields[:n] {
			if equalFoldASCII(name, raw[g.nameStart:g.nameEnd]) {
				return data, norm, false // a duplicate, or one after strings.ToUpper
			}
		}
		value := raw[f.valueStart:f.valueEnd]
		if string(name) == "id" {
			if value[0] != '"' || !validIDBytes(value[1:len(value)-1]) {
				return data, norm, false
			}
			hasID = true
		}
		if (value[0] == '-' || (value[0] >= '0' && value[0] <= '9')) && !isAmountName(name) && !numericFits(value) {
			return data, norm, false // a number the numeric type cannot hold
		}
		fields[n] = f
		n++
		i = skipJSONSpace(raw, i)
		if i >= len(raw) {
			return data, norm, false
		}
		if raw[i] == '}' {
			i++
			break
		}
		if raw[i] != ',' {
			return data, norm, false
		}
		i = skipJSONSpace(raw, i+1)
	}
	if !hasID || skipJSONSpace(raw, i) != len(raw) {
		return data, norm, false
	}
	data0, norm0 := len(data), len(norm)
	norm = append(norm, '{')
	for k, f := range fields[:n] {
		name := raw[f.nameStart:f.nameEnd]
		value := raw[f.valueStart:f.valueEnd]
		keyStart := len(data)
		data = appendUpperASCII(data, name)
		key := data[keyStart:]
		data = append(data, ':')
		if k > 0 {
			norm = append(norm, ',')
		}
		norm = append(norm, '"')
		norm = append(norm, key...)
		norm = append(norm, '"', ':')
		var ok bool
		data, norm, ok = appendFlatValue(data, norm, kindOf(key), value)
		if !ok {
			return data[:data0], norm[:norm0], false
		}
		data = append(data, ',')
	}
	return data, append(norm, '}'), true
}

// Keys whose values Transform changes (kindOf).
const (
	keyOther = iota
	keyAmount
	keyName
	keyEmail
)

// kindOf classifies an upper-cased key.
func kindOf(key []byte) int {
	switch string(key) {
	case "AMOUNT":
		return keyAmount
	case "NAME":
		return keyName
	case "EMAIL":
		return keyEmail
	}
	return keyOther
}

// appendFlatValue appends one value's data text to data and its Normalized
// JSON to norm as transformValue does under a key of the given kind, for the
// values appendFlatRecord takes. It reports false where transformValue
// rejects the value.
func appendFlatValue(data, norm []byte, kind int, value []byte) ([]byte, []byte, bool) {
	switch value[0] {
	case 'n':
		return append(data, "null"...), append(norm, "null"...), true
	case 't', 'f':
		if kind == keyAmount {
			return data, norm, false
		}
		return append(data, value...), append(norm, value...), true
	case '"':
		s := value[1 : len(value)-1] // no escapes, no control characters
		start := len(data)
		switch kind {
		case keyAmount:
			var ok bool
			if data, ok = appendAmount(data, s, false); !ok {
				return data, norm, false
			}
		case keyName, keyEmail:
			if !isASCII(s) {
				var t string
				if kind == keyName {
					t = strings.ToUpper(string(s))
				} else {
					t = strings.ToLower(string(s))
				}
				return append(data, t...), appendJSONStringBytes(norm, t), true
			}
			if kind == keyName {
				data = appendUpperASCII(data, s)
			} else {
				data = appendLowerASCII(data, s)
			}
		default:
			data = append(data, s...)
		}
		// The text needs no escape: s has none, no control character and no
		// quote, and an amount or an ASCII case change adds none.
		norm = append(norm, '"')
		norm = append(norm, data[start:]...)
		return data, append(norm, '"'), true
	default: // a number
		if kind != keyAmount {
			return append(data, value...), append(norm, value...), true
		}
		start := len(data)
		var ok bool
		if data, ok = appendAmount(data, value, true); !ok {
			return data, norm, false
		}
		norm = append(norm, '"')
		norm = append(norm, data[start:]...)
		return data, append(norm, '"'), true
	}
}

// scanFlatValue returns the index just past the value at raw[i] when it is
// a string without escapes, a JSON number or a literal, and -1 otherwise
// (an object, an array, an escape, a control character, broken JSON).
func scanFlatValue(raw []byte, i int) int {
	if i >= len(raw) {
		return -1
	}
	switch c := raw[i]; {
	case c == '"':
		for i++; i < len(raw); i++ {
			switch c := raw[i]; {
			case c == '"':
				return i + 1
			case c == '\\' || c < 0x20:
				return -1
			}
		}
		return -1
	case c == 't':
		return literalEnd(raw, i, "true")
	case c == 'f':
		return literalEnd(raw, i, "false")
	case c == 'n':
		return literalEnd(raw, i, "null")
	case c == '-' || (c >= '0' && c <= '9'):
		return numberEnd(raw, i)
	}
	return -1
}

// literalEnd returns the index past lit at raw[i], or -1.
func literalEnd(raw []byte, i int, lit string) int {
	if len(raw)-i < len(lit) || string(raw[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// numberEnd returns the index past the JSON number at raw[i]
// (-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?), or -1 when it breaks
// the grammar.
func numberEnd(raw []byte, i int) int {
	digits := func() int {
		start := i
		for i < len(raw) && raw[i] >= '0' && raw[i] <= '9' {
			i++
		}
		return i - start
	}
	if raw[i] == '-' {
		i++
	}
	if i < len(raw) && raw[i] == '0' {
		i++
	} else if digits() == 0 {
		return -1
	}
	if i < len(raw) && raw[i] == '.' {
		i++
		if digits() == 0 {
			return -1
		}
	}
	if i < len(raw) && (raw[i] == 'e' || raw[i] == 'E') {
		i++
		if i < len(raw) && (raw[i] == '+' || raw[i] == '-') {
			i++
		}
		if digits() == 0 {
			return -1
		}
	}
	return i
}

// appendAmount appends the AMOUNT text of s (a JSON number when number is
// set, else a JSON string's content) as normalizeAmount gives it, and
// reports false where it rejects s. Plain decimals of at most 18 integer
// digits and 2 decimals need no rounding and are written directly; the rest
// go through normalizeAmount.
func appendAmount(dst, s []byte, number bool) ([]byte, bool) {
	i := 0
	neg := i < len(s) && s[i] == '-'
	if neg {
		i++
	}
	intStart := i
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	intDigits := s[intStart:i]
	var frac []byte
	if i < len(s) && s[i] == '.' {
		i++
		fracStart := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		frac = s[fracStart:i]
		if len(frac) == 0 {
			i = -1 // a bare point: normalizeAmount rejects it
		}
	}
	for len(intDigits) > 1 && intDigits[0] == '0' {
		intDigits = intDigits[1:]
	}
	if i != len(s) || len(intDigits) == 0 || len(intDigits) > 18 || len(frac) > 2 {
		out, ok := normalizeAmount(string(s), number)
		return append(dst, out...), ok
	}
	zero := true
	for _, c := range intDigits {
		zero = zero && c == '0'
	}
	for _, c := range frac {
		zero = zero && c == '0'
	}
	if neg && !zero {
		dst = append(dst, '-')
	}
	dst = append(dst, intDigits...)
	dst = append(dst, '.')
	dst = append(dst, frac...)
	for range 2 - len(frac) {
		dst = append(dst, '0')
	}
	return dst, true
}

func skipJSONSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// isAmountName reports whether the ASCII name upper-cases to AMOUNT.
func isAmountName(name []byte) bool {
	return equalFoldASCII(name, []byte("AMOUNT"))
}

// equalFoldASCII reports whether two ASCII strings are equal after
// upper-casing.
func equalFoldASCII(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if upperASCII(a[i]) != upperASCII(b[i]) {
			return false
		}
	}
	return true
}

func upperASCII(c byte) byte {
	if c >= 'a' && c <= 'z' {
		return c - 'a' + 'A'
	}
	return c
}

func appendUpperASCII(dst, s []byte) []byte {
	for _, c := range s {
		dst = append(dst, upperASCII(c))
	}
	return dst
}

func appendLowerASCII(dst, s []byte) []byte {
	for _, c := range s {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// validIDBytes is validID of an id without escapes, with no allocation for
// an ASCII one.
func validIDBytes(id []byte) bool {
	if !isASCII(id) {
		return validID(string(id))
	}
	if len(id) == 0 || len(id) > MaxIDLength {
		return false
	}
	for _, c := range id {
		if c < 0x20 || c == 0x7f {
			return false // Cc
		}
	}
	// ASCII white space other than the controls: only ' '.
	return id[0] != ' ' && id[len(id)-1] != ' '
}
