package httpapi

import (
	"bytes"
	"errors"
	"io"
)

var errTooLarge = errors.New("body exceeds the payload limit")

// initialBodyBuffer is the most a declared Content-Length sizes the body
// buffer up front; beyond it the buffer grows only as bytes arrive, so a
// large declared length alone pins no memory.
const initialBodyBuffer = 64 << 10

// readLimited reads r to the end, or fails with errTooLarge as soon as more
// than limit bytes arrived: it never reads beyond limit+1 bytes. A positive
// declared length (at most limit) sizes the buffer up front, but never
// beyond initialBodyBuffer. Errors from r (errBusy from a budgetReader
// included) come back as they are.
func readLimited(r io.Reader, limit, declared int64) ([]byte, error) {
	var buf bytes.Buffer
	if declared > 0 && declared <= limit {
		buf.Grow(int(min(declared+1, initialBodyBuffer)))
	}
	n, err := buf.ReadFrom(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if n > limit {
		return nil, errTooLarge
	}
	return buf.Bytes(), nil
}
