package etl

import (
	"encoding/json"
	"strings"
)

// parseValid is ParseBatch for a body that is known to be valid UTF-8 JSON
// (json.Valid): it walks the bytes once, without encoding/json's token
// stream, and applies the same rules in the same order, so it returns
// exactly what parseTokens returns for that body (FuzzParseBatchPaths pins
// that). Syntax is not checked again: on a body that is not valid JSON its
// result is undefined.
func parseValid(body []byte, maxRecords int) ([]Record, error) {
	w := walker{b: body}
	w.space()
	if w.b[w.i] != '[' {
		return nil, invalidJSON()
	}
	w.i++
	var (
		records []Record
		first   *Error // first record-level error; reported only if the body is otherwise fine
	)
	for index := 0; ; index++ {
		w.space()
		if w.b[w.i] == ',' {
			w.i++
			w.space()
		}
		if w.b[w.i] == ']' {
			break
		}
		if index >= maxRecords {
			return nil, batchTooLarge() // element maxRecords+1 has started; skip the rest
		}
		if w.b[w.i] != '{' {
			if err := w.skip(1); err != nil {
				return nil, err
			}
			if first == nil {
				first = invalidRecord(index)
			}
			continue
		}
		rec, valid, err := w.record()
		if err != nil {
			return nil, err
		}
		if !valid && first == nil {
			first = invalidRecord(index)
		}
		if first == nil {
			records = append(records, rec)
		}
	}
	if first != nil {
		return nil, first
	}
	if records == nil {
		records = []Record{}
	}
	return records, nil
}

// walker reads a valid JSON document: b[i] is the next unread byte.
type walker struct {
	b []byte
	i int
}

// space skips JSON white space.
func (w *walker) space() {
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case ' ', '\t', '\n', '\r':
			w.i++
		default:
			return
		}
	}
}

// str consumes the string literal at b[i] and returns it with its quotes,
// and whether it holds an escape.
func (w *walker) str() (raw []byte, escaped bool) {
	start := w.i
	i := start + 1
	for w.b[i] != '"' {
		if w.b[i] == '\\' {
			escaped = true
			i++ // the escaped byte cannot end the string
		}
		i++
	}
	w.i = i + 1
	return w.b[start:w.i], escaped
}

// name consumes a member name and the ':' after it, returning the name
// decoded as encoding/json decodes it.
func (w *walker) name() string {
	raw, escaped := w.str()
	w.space()
	w.i++ // ':'
	w.space()
	return unquote(raw, escaped)
}

// unquote decodes a valid string literal.
func unquote(raw []byte, escaped bool) string {
	if !escaped {
		return string(raw[1 : len(raw)-1])
	}
	var s string
	_ = json.Unmarshal(raw, &s) // valid JSON: cannot fail
	return s
}

// scalar consumes a number or a literal (true, false, null).
func (w *walker) scalar() {
	for w.i < len(w.b) {
		c := w.b[w.i]
		if isNumberByte(c) || ('a' <= c && c <= 'z') {
			w.i++
			continue
		}
		return
	}
}

// walkFrame is one open object or array inside skip.
type walkFrame struct {
	object bool
	names  memberSet
}

// skip consumes the value at b[i], whose container (if it is one) sits at
// nesting depth+1, checking every nested object for duplicate member names
// and the whole document for maxDepth, as parser.skip does.
func (w *walker) skip(depth int) error {
	switch w.b[w.i] {
	case '"':
		w.str()
		return nil
	case '{', '[':
	default:
		w.scalar()
		return nil
	}
	var frames [8]walkFrame
	stack := frames[:0]
	for {
		if c := w.b[w.i]; c == '{' || c == '[' {
			stack = append(stack, walkFrame{object: c == '{'})
			if depth+len(stack) > maxDepth {
				return invalidJSON()
			}
			w.i++
		} else if c == '"' {
			w.str()
		} else {
			w.scalar()
		}
		// After a value or an opening delimiter: the next member or element,
		// or the ends of the containers closed here.
		for {
			w.space()
			c := w.b[w.i]
			if c == '}' || c == ']' {
				w.i++
				stack = stack[:len(stack)-1]
				if len(stack) == 0 {
					return nil
				}
				continue
			}
			if c == ',' {
				w.i++
				w.space()
			}
			break
		}
		if top := &stack[len(stack)-1]; top.object {
			if !top.names.add(w.name()) {
				return invalidJSON()
			}
		}
	}
}

// record reads the members of the record at b[i] ('{'), through its '}', as
// parser.record does. valid is false when the record breaks a record-level
// rule; err is set only for body-level problems.
func (w *walker) record() (rec Record, valid bool, err error) {
	valid = true
	hasID := false
	var names, upper memberSet
	w.i++ // '{'
	for {
		w.space()
		if w.b[w.i] == ',' {
			w.i++
			w.space()
		}
		if w.b[w.i] == '}' {
			w.i++
			break
		}
		name := w.name()
		if !names.add(name) {
			return Record{}, false, invalidJSON() // duplicate member name
		}
		start := w.i
		if err := w.skip(2); err != nil {
			return Record{}, false, err
		}
		raw := json.RawMessage(w.b[start:w.i])

		upperName := strings.ToUpper(name)
		if !validFieldName(name) || !upper.add(upperName) || (upperName != "AMOUNT" && !loadable(raw)) {
			valid = false
		}
		if name == "id" {
			hasID = true
			id := ""
			if raw[0] != '"' {
				valid = false
			} else {
				_, escaped := (&walker{b: raw}).str()
				id = unquote(raw, escaped)
				if !validID(id) {
					valid = false
				}
			}
			rec.ID = id
		}
		if valid {
			rec.Fields = append(rec.Fields, Field{Name: name, Value: raw})
		}
	}
	if !hasID {
		valid = false
	}
	return rec, valid, nil
}
