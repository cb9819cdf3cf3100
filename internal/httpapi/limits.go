package httpapi

import (
	"errors"
	"io"
	"net/http"
	"sync"

	"github.com/mightyetl/mightyetl/internal/codes"
)

// Defaults of the request resource bounds (Options).
const (
	// DefaultMaxInFlightBytes is the default budget of request body bytes
	// held at once across all requests, 64 MiB
	// (MIGHTYETL_INTAKE_MAX_INFLIGHT_BYTES).
	DefaultMaxInFlightBytes = 64 << 20
	// DefaultProcessConcurrency is the default number of POST
	// /api/etl/process requests that run their transaction at once.
	DefaultProcessConcurrency = 4
	// busyRetryAfter is the Retry-After (seconds) of 503 etl_server_busy.
	busyRetryAfter = "1"
)

// errBusy means the in-flight byte budget could not hold more of a body.
var errBusy = errors.New("in-flight body byte budget exhausted")

// byteBudget counts the request body bytes held by requests in flight. A
// request takes bytes as they arrive (never a declared length) and gives
// them all back when its handler returns. It is safe for concurrent use.
type byteBudget struct {
	mu   sync.Mutex
	used int64
	max  int64
}

// take reserves n bytes, or reports false (reserving nothing) when the
// budget cannot hold them.
func (b *byteBudget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		return false
	}
	b.used += n
	return true
}

// give returns n bytes to the budget.
func (b *byteBudget) give(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

// budgetReader takes every byte it returns from the budget; release gives
// them back. Not safe for concurrent use (one request reads its body).
type budgetReader struct {
	r      io.Reader
	budget *byteBudget
	held   int64
}

func (br *budgetReader) Read(p []byte) (int, error) {
	n, err := br.r.Read(p)
	if n > 0 {
		if !br.budget.take(int64(n)) {
			return 0, errBusy
		}
		br.held += int64(n)
	}
	return n, err
}

// release gives back everything this reader took; safe to call twice.
func (br *budgetReader) release() {
	br.budget.give(br.held)
	br.held = 0
}

// writeBusy answers 503 etl_server_busy with Retry-After: the server holds
// as many request body bytes as its budget allows. The unread rest of the
// body is not drained, so the connection closes.
func writeBusy(w http.ResponseWriter, r *http.Request) {
	if rec, ok := w.(*recorder); ok {
		rec.errorCode = codes.ServerBusy
	}
	w.Header().Set("Connection", "close")
	writeProblem(&retryAfterWriter{ResponseWriter: w, seconds: busyRetryAfter}, r, codes.ServerBusy)
}
