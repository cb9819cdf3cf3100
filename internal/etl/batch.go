package etl

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxIDLength is the maximum length of a record id in Unicode code points.
const MaxIDLength = 256

// maxDepth bounds the nesting of the whole body (the top-level array counts as 1, a record as
// 2). encoding/json's Token stream does not bound nesting itself, and deeper documents only
// cost memory here and stack depth in PostgreSQL's jsonb parser; flat records need 2.
const maxDepth = 128

// smallSet is the member count up to which duplicate detection scans a slice instead of
// building a map; beyond it a map keeps the check linear for adversarial bodies.
const smallSet = 16

// Record is one validated element of a batch: a JSON object with a textual id.
type Record struct {
	// ID is the decoded value of the record's "id" member.
	ID string
	// Fields are all members, "id" included, in input order. Names are unique, also after
	// strings.ToUpper.
	Fields []Field
}

// Field is one member of a record.
type Field struct {
	// Name is the decoded member name as given (not upper-cased).
	Name string
	// Value is the member's raw JSON value exactly as in the body (not compacted). It aliases
	// the body passed to ParseBatch, which must not be modified while the record is in use.
	Value json.RawMessage
}

// ParseBatch validates body and returns its records in input order.
//
// body must be UTF-8 JSON whose only value is an array ("[]" is accepted) of at most maxRecords
// elements. It fails with an *Error whose Code is:
//   - codes.InvalidJSON when body is empty, not UTF-8, malformed, not an array, followed by
//     trailing data, nested deeper than 128 levels, or when any object at any depth repeats a
//     member name (compared after JSON unescaping);
//   - codes.BatchTooLarge as soon as element maxRecords+1 starts (the rest is not read);
//   - codes.InvalidRecord (Index = first bad record) when an element is not an object; when a
//     record lacks an "id" member holding a JSON string that is non-blank, has no leading or
//     trailing white space, has at most 256 code points and contains no control (Cc), format
//     (Cf), line (Zl) or paragraph (Zp) separator characters; or when a field name is empty,
//     contains a control character, ':' or ',', or collides with another after
//     strings.ToUpper; or when a value other than AMOUNT's (which is stored parsed and
//     rounded), at any depth, cannot be stored by PostgreSQL: a
//     \u0000 escape, a UTF-16 surrogate escape outside a high-low pair, or a number outside
//     the numeric type (more than 131,072 digits before the point or 16,383 after it).
//
// The body-level codes take precedence over codes.InvalidRecord (see the package doc). The
// returned Field values alias body. ParseBatch is safe for concurrent use.
func ParseBatch(body []byte, maxRecords int) ([]Record, error) {
	if len(bytes.TrimSpace(body)) == 0 || !utf8.Valid(body) {
		return nil, invalidJSON()
	}
	if json.Valid(body) {
		// The common case: a walk that relies on the syntax being checked.
		return parseValid(body, maxRecords)
	}
	// Broken JSON: the token stream decides which problem comes first (an
	// oversized batch that breaks later is etl_batch_too_large).
	return parseTokens(body, maxRecords)
}

// parseTokens is ParseBatch on encoding/json's token stream: the reference
// the faster parseValid must agree with on every valid body, and the path of
// invalid ones.
func parseTokens(body []byte, maxRecords int) ([]Record, error) {
	p := parser{body: body, dec: json.NewDecoder(bytes.NewReader(body))}
	p.dec.UseNumber()

	if tok, err := p.dec.Token(); err != nil || tok != json.Delim('[') {
		return nil, invalidJSON()
	}
	var (
		records []Record
		first   *Error // first record-level error; reported only if the body is otherwise fine
	)
	for index := 0; p.dec.More(); index++ {
		tok, err := p.dec.Token()
		if err != nil {
			return nil, invalidJSON()
		}
		if index >= maxRecords {
			return nil, batchTooLarge() // element maxRecords+1 has started; skip the rest
		}
		if tok != json.Delim('{') {
			if err := p.skip(tok, 1); err != nil {
				return nil, err
			}
			if first == nil {
				first = invalidRecord(index)
			}
			continue
		}
		rec, valid, err := p.record()
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
	if tok, err := p.dec.Token(); err != nil || tok != json.Delim(']') {
		return nil, invalidJSON()
	}
	if _, err := p.dec.Token(); !errors.Is(err, io.EOF) {
		return nil, invalidJSON() // trailing data after the array
	}
	if first != nil {
		return nil, first
	}
	if records == nil {
		records = []Record{}
	}
	return records, nil
}

type parser struct {
	body []byte
	dec  *json.Decoder
}

// record reads the members of a record whose '{' was consumed, through its '}'. valid is false
// when the record breaks a record-level rule; err is set only for body-level problems.
func (p *parser) record() (rec Record, valid bool, err error) {
	valid = true
	hasID := false
	var names, upper memberSet
	for p.dec.More() {
		tok, err := p.dec.Token()
		if err != nil {
			return Record{}, false, invalidJSON()
		}
		name, ok := tok.(string)
		if !ok {
			return Record{}, false, invalidJSON()
		}
		if !names.add(name) {
			return Record{}, false, invalidJSON() // duplicate member name
		}
		start := p.dec.InputOffset() // just past the name's closing quote
		tok, err = p.dec.Token()
		if err != nil {
			return Record{}, false, invalidJSON()
		}
		if err := p.skip(tok, 2); err != nil {
			return Record{}, false, err
		}
		raw := trimValue(p.body[start:p.dec.InputOffset()])

		upperName := strings.ToUpper(name)
		// AMOUNT is stored as its parsed, rounded decimal (the transform
		// rejects what it cannot parse); every other value is stored as given.
		if !validFieldName(name) || !upper.add(upperName) || (upperName != "AMOUNT" && !loadable(raw)) {
			valid = false
		}
		if name == "id" {
			hasID = true
			id, ok := tok.(string)
			if !ok || !validID(id) {
				valid = false
			}
			rec.ID = id
		}
		if valid {
			rec.Fields = append(rec.Fields, Field{Name: name, Value: raw})
		}
	}
	if tok, err := p.dec.Token(); err != nil || tok != json.Delim('}') {
		return Record{}, false, invalidJSON()
	}
	if !hasID {
		valid = false
	}
	return rec, valid, nil
}

// frame is one open object or array inside skip.
type frame struct {
	object    bool
	expectKey bool // in an object: the next token is a member name (or '}')
	names     memberSet
}

// skip consumes the rest of the value whose first token is first, at nesting depth (of the
// value's container), checking every nested object for duplicate member names and the whole
// document for maxDepth. Scalars need nothing more. It is iterative, so hostile nesting cannot
// grow the goroutine stack.
func (p *parser) skip(first json.Token, depth int) error {
	d, ok := first.(json.Delim)
	if !ok {
		return nil
	}
	stack := []frame{{object: d == '{', expectKey: true}}
	for len(stack) > 0 {
		if depth+len(stack) > maxDepth {
			return invalidJSON()
		}
		tok, err := p.dec.Token()
		if err != nil {
			return invalidJSON()
		}
		top := &stack[len(stack)-1]
		if top.object && top.expectKey {
			if name, ok := tok.(string); ok {
				if !top.names.add(name) {
					return invalidJSON()
				}
				top.expectKey = false
				continue
			}
		}
		top.expectKey = true // a value (or a closing delimiter) ends the member
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				stack = append(stack, frame{object: d == '{', expectKey: true})
			default:
				stack = stack[:len(stack)-1]
			}
		}
	}
	return nil
}

// trimValue strips the ':' and JSON white space that precede a member value.
func trimValue(b []byte) json.RawMessage {
	i := 0
	for i < len(b) && (b[i] == ':' || b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return json.RawMessage(b[i:])
}

// validID reports whether id may identify a record (see ParseBatch).
func validID(id string) bool {
	if id == "" || utf8.RuneCountInString(id) > MaxIDLength {
		return false
	}
	first, _ := utf8.DecodeRuneInString(id)
	last, _ := utf8.DecodeLastRuneInString(id)
	if unicode.IsSpace(first) || unicode.IsSpace(last) {
		return false
	}
	for _, r := range id {
		if unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp) {
			return false
		}
	}
	return true
}

// validFieldName reports whether name can be encoded as a "KEY:value," segment.
func validFieldName(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		if r == ':' || r == ',' || unicode.Is(unicode.Cc, r) {
			return false
		}
	}
	return true
}

// memberSet detects repeated member names: a scan of an inline array while small (no
// allocation), a map beyond smallSet. The zero value is empty.
type memberSet struct {
	n     int
	small [smallSet]string
	set   map[string]struct{}
}

// add records name and reports false if it was already present.
func (s *memberSet) add(name string) bool {
	if s.set != nil {
		if _, dup := s.set[name]; dup {
			return false
		}
		s.set[name] = struct{}{}
		return true
	}
	for _, n := range s.small[:s.n] {
		if n == name {
			return false
		}
	}
	if s.n < smallSet {
		s.small[s.n] = name
		s.n++
		return true
	}
	s.set = make(map[string]struct{}, 2*smallSet)
	for _, n := range s.small {
		s.set[n] = struct{}{}
	}
	s.set[name] = struct{}{}
	s.small = [smallSet]string{}
	return true
}
