package chunked

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Payload formats (etl_chunked_loads.load_format).
const (
	FormatJSONL     = "jsonl"
	FormatJSONArray = "json_array"
)

// readSize is how much the Reader asks its source for at a time.
const readSize = 64 << 10

// maxNesting bounds the brackets one JSON array element may open; the
// transform admits 127 (etl's 128 counts the array), so deeper elements are
// already bad records and only need to be skipped correctly.
const maxNesting = 1 << 16

// Source is the payload byte stream a Reader cuts: pg.PayloadReader. Each
// Read returns bytes of one part only, and Position, called after it,
// returns the part of those bytes and the offset just after the last one.
type Source interface {
	io.Reader
	Position() (part, offset int64)
}

// Position is where a record starts in the payload: its 1-based part
// number, the byte offset in that part (an offset equal to the part's length
// means the start of the next part) and its 1-based record number.
type Position struct {
	Part, Offset, Record int64
}

// Start is the position of the first record of a payload.
var Start = Position{Part: 1, Offset: 0, Record: 1}

// Record is one record the Reader cut.
type Record struct {
	// Number is the record's 1-based number: its line (JSON Lines, counting
	// every line) or its element index (JSON array).
	Number int64
	// Raw is the record's bytes (a line without its line end, or one array
	// element); it aliases the Reader's buffer and is valid until the next
	// call of Next. Nil when TooLarge.
	Raw []byte
	// TooLarge: the record is longer than the Reader's bound; it was
	// skipped, not held.
	TooLarge bool
	// Bytes is how many payload bytes the Reader consumed since the previous
	// record, this record's included (separators and blank lines count).
	Bytes int64
}

// ErrStructure reports a JSON array payload whose structure is broken where
// records cannot be told apart (no '[' at the start, a missing ',' or ']'
// between elements, an unbalanced bracket, data after the closing ']'): the
// record it names cannot be skipped. Match it with errors.As on
// *StructureError.
var ErrStructure = errors.New("payload is not a JSON array of records")

// StructureError is ErrStructure at a record number: the element being read
// (or that would come next) when the structure broke.
type StructureError struct {
	Record int64
}

func (e *StructureError) Error() string {
	return fmt.Sprintf("%v at record %d", ErrStructure, e.Record)
}

func (e *StructureError) Unwrap() error { return ErrStructure }

// segment maps a stretch of the Reader's consumed stream (absolute index
// abs, n bytes) to its part and the offset of its first byte there.
type segment struct {
	abs, part, offset, n int64
}

// array reader states.
const (
	arrayStart    = iota // before the opening '['
	arrayFirst           // after '[': an element or ']'
	arrayAfter           // after an element: ',' or ']'
	arrayNeedElem        // after ',': an element
	arrayDone            // after ']': only white space until the end
)

// Reader cuts a payload into records from a checkpoint position, holding at
// most max(bound, readSize) plus readSize bytes. It is not safe for
// concurrent use.
type Reader struct {
	src    Source
	format string
	bound  int
	start  Position

	buf      []byte
	r, w     int   // unread bytes are buf[r:w]
	base     int64 // absolute stream index of buf[0] (0 = the start position)
	segments []segment
	srcErr   error // the source's error once it returned one (io.EOF: its end)

	next     int64 // the number of the next record
	consumed int64 // absolute index just after the last record returned
	lastEnd  int64 // absolute index where the previous Next ended
	state    int   // JSON array state
}

// NewReader returns a Reader of src (which must start at from's part and
// offset) in format (FormatJSONL or FormatJSONArray) whose first record is
// number from.Record. bound is the largest record it holds (a longer one
// comes back TooLarge); it must be positive. A JSON array read from a record
// other than the first resumes right after the previous element.
func NewReader(src Source, format string, from Position, bound int) *Reader {
	rd := &Reader{src: src, format: format, bound: max(bound, 1), start: from, next: from.Record,
		buf: make([]byte, readSize)}
	rd.state = arrayStart
	if from.Record > 1 {
		rd.state = arrayAfter
	}
	return rd
}

// Checkpoint returns where the record after the last one Next returned
// starts: what a chunk commits so that the next claimant resumes there.
func (rd *Reader) Checkpoint() Position {
	part, off := rd.posAt(rd.consumed)
	return Position{Part: part, Offset: off, Record: rd.next}
}

// posAt maps an absolute stream index (at most what was read) to its part
// and offset.
func (rd *Reader) posAt(abs int64) (part, offset int64) {
	for i := len(rd.segments) - 1; i >= 0; i-- {
		s := rd.segments[i]
		if s.abs <= abs && abs <= s.abs+s.n {
			if abs == s.abs+s.n && i+1 < len(rd.segments) && rd.segments[i+1].abs == abs {
				s = rd.segments[i+1]
			}
			return s.part, s.offset + (abs - s.abs)
		}
	}
	return rd.start.Part, rd.start.Offset
}

// fill reads more of the source into the buffer, compacting and growing it
// up to the bound plus one read. It returns the source's error (io.EOF at
// its end) when nothing more can come.
func (rd *Reader) fill() error {
	if rd.srcErr != nil {
		return rd.srcErr
	}
	if rd.r > 0 {
		copy(rd.buf, rd.buf[rd.r:rd.w])
		rd.base += int64(rd.r)
		rd.w -= rd.r
		rd.r = 0
	}
	if len(rd.buf)-rd.w < readSize/2 {
		grown := make([]byte, max(2*len(rd.buf), rd.w+readSize))
		copy(grown, rd.buf[:rd.w])
		rd.buf = grown
	}
	for {
		n, err := rd.src.Read(rd.buf[rd.w:])
		if n > 0 {
			part, end := rd.src.Position()
			abs := rd.base + int64(rd.w)
			rd.segments = append(rd.segments, segment{abs: abs, part: part, offset: end - int64(n), n: int64(n)})
			rd.w += n
		}
		if err != nil {
			rd.srcErr = err
			if n > 0 {
				return nil
			}
			return err
		}
		if n > 0 {
			return nil
		}
	}
}

// finish marks the buffer up to index i as read (the end of a record, or of
// the skipped part of a too long one) and returns the bytes consumed since
// the previous call.
func (rd *Reader) finish(i int) int64 {
	rd.r = i
	rd.consumed = rd.base + int64(i)
	n := rd.consumed - rd.lastEnd
	rd.lastEnd = rd.consumed
	// Forget the segments wholly before the consumed point, keeping the one
	// it ends in.
	k := 0
	for k+1 < len(rd.segments) && rd.segments[k].abs+rd.segments[k].n < rd.consumed {
		k++
	}
	if k > 0 {
		rd.segments = append(rd.segments[:0], rd.segments[k:]...)
	}
	return n
}

// Next returns the next record, io.EOF after the last, a *StructureError
// for a broken JSON array, or the source's error.
func (rd *Reader) Next() (Record, error) {
	if rd.format == FormatJSONArray {
		return rd.nextElement()
	}
	return rd.nextLine()
}

// nextLine is Next for JSON Lines: blank lines are counted and skipped.
func (rd *Reader) nextLine() (Record, error) {
	var blank int64
	for {
		rec, err := rd.line()
		if err != nil {
			return Record{}, err
		}
		if !rec.TooLarge && len(bytes.TrimSpace(rec.Raw)) == 0 {
			blank += rec.Bytes
			continue
		}
		rec.Bytes += blank
		return rec, nil
	}
}

// line cuts the next line (its end "\n" consumed, not returned).
func (rd *Reader) line() (Record, error) {
	scanned := rd.r
	tooLarge := false
	var skipped int64
	for {
		if i := bytes.IndexByte(rd.buf[scanned:rd.w], '\n'); i >= 0 {
			end := scanned + i
			rec := Record{Number: rd.next}
			if tooLarge || end-rd.r > rd.bound {
				rec.TooLarge = true
			} else {
				rec.Raw = rd.buf[rd.r:end]
			}
			rd.next++
			rec.Bytes = rd.finish(end+1) + skipped
			return rec, nil
		}
		scanned = rd.w
		if rd.w-rd.r > rd.bound {
			// Too long to hold: skip it, keep looking for its end.
			tooLarge = true
			skipped += rd.finish(rd.w)
		}
		scannedOff := scanned - rd.r
		if err := rd.fill(); err != nil {
			if !errors.Is(err, io.EOF) {
				return Record{}, err
			}
			if rd.r == rd.w && !tooLarge {
				return Record{}, io.EOF
			}
			// The last line has no line end.
			rec := Record{Number: rd.next}
			if tooLarge || rd.w-rd.r > rd.bound {
				rec.TooLarge = true
			} else {
				rec.Raw = rd.buf[rd.r:rd.w]
			}
			rd.next++
			rec.Bytes = rd.finish(rd.w) + skipped
			return rec, nil
		}
		scanned = rd.r + scannedOff // indexes moved by the compaction
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// skipSpace advances past white space; it reports false at the end of the
// stream (error nil) or returns the source's error.
func (rd *Reader) skipSpace() (bool, error) {
	for {
		for rd.r < rd.w && isSpace(rd.buf[rd.r]) {
			rd.r++
		}
		if rd.r < rd.w {
			return true, nil
		}
		if err := rd.fill(); err != nil {
			if errors.Is(err, io.EOF) {
				return false, nil
			}
			return false, err
		}
	}
}

// nextElement is Next for a JSON array.
func (rd *Reader) nextElement() (Record, error) {
	broken := func() (Record, error) { return Record{}, &StructureError{Record: rd.next} }
	for {
		more, err := rd.skipSpace()
		if err != nil {
			return Record{}, err
		}
		switch rd.state {
		case arrayStart:
			if !more || rd.buf[rd.r] != '[' {
				return broken()
			}
			rd.r++
			rd.state = arrayFirst
			continue
		case arrayAfter:
			if !more {
				return broken()
			}
			switch rd.buf[rd.r] {
			case ',':
				rd.r++
				rd.state = arrayNeedElem
			case ']':
				rd.r++
				rd.state = arrayDone
			default:
				return broken()
			}
			continue
		case arrayDone:
			if more {
				return broken()
			}
			// The checkpoint stays right after the last element: a load
			// resumed there reads the closing ']' again and ends.
			return Record{}, io.EOF
		case arrayFirst:
			if !more {
				return broken()
			}
			if rd.buf[rd.r] == ']' {
				rd.r++
				rd.state = arrayDone
				continue
			}
		case arrayNeedElem:
			if !more || rd.buf[rd.r] == ']' {
				return broken()
			}
		}
		return rd.element()
	}
}

// elementScan is the scanner state of one array element across fills.
type elementScan struct {
	stack    []byte // the closers expected
	inString bool
	escaped  bool
	scalar   bool // a number or literal: ends before a delimiter
	done     bool
}

// step scans c and reports false when c does not fit the structure.
func (s *elementScan) step(c byte, first bool) bool {
	switch {
	case s.inString:
		switch {
		case s.escaped:
			s.escaped = false
		case c == '\\':
			s.escaped = true
		case c == '"':
			s.inString = false
			if len(s.stack) == 0 {
				s.done = true
			}
		}
		return true
	case first && c != '{' && c != '[' && c != '"':
		s.scalar = true
		return true
	}
	switch c {
	case '"':
		s.inString = true
	case '{':
		s.stack = append(s.stack, '}')
	case '[':
		s.stack = append(s.stack, ']')
	case '}', ']':
		if len(s.stack) == 0 || s.stack[len(s.stack)-1] != c {
			return false
		}
		s.stack = s.stack[:len(s.stack)-1]
		if len(s.stack) == 0 {
			s.done = true
		}
	}
	return len(s.stack) <= maxNesting
}

// element cuts the array element starting at buf[r] (not white space).
func (rd *Reader) element() (Record, error) {
	var s elementScan
	start := rd.r
	i := rd.r
	first := true
	tooLarge := false
	var skipped int64
	for {
		for ; i < rd.w; i++ {
			c := rd.buf[i]
			if s.scalar && (c == ',' || c == ']' || isSpace(c)) {
				s.done = true
				break
			}
			if !s.step(c, first) {
				return Record{}, &StructureError{Record: rd.next}
			}
			first = false
			if s.done {
				i++
				break
			}
		}
		if s.done {
			rec := Record{Number: rd.next}
			if tooLarge || i-start > rd.bound {
				rec.TooLarge = true
			} else {
				rec.Raw = rd.buf[start:i]
			}
			rd.next++
			rec.Bytes = rd.finish(i) + skipped
			rd.state = arrayAfter
			return rec, nil
		}
		if i-start > rd.bound {
			tooLarge = true
			rd.r = i
			skipped += rd.finish(i)
			start = rd.r
		}
		off := i - rd.r
		startOff := start - rd.r
		if err := rd.fill(); err != nil {
			if errors.Is(err, io.EOF) {
				if s.scalar && !s.inString {
					s.done = true
					i = rd.r + off
					start = rd.r + startOff
					continue
				}
				return Record{}, &StructureError{Record: rd.next}
			}
			return Record{}, err
		}
		i = rd.r + off
		start = rd.r + startOff
	}
}
