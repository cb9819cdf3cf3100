package events

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"sync/atomic"
	"time"

	"github.com/mightyetl/mightyetl/internal/codes"
)

// ObjectRequest is the body of a request that references a JetStream
// Object Store object instead of carrying the records (issue 32):
//
//	{"objectStore":{"bucket":"<bucket>","name":"<object>","sha256":"<64 hex>"},
//	 "format":"jsonl"|"json_array","maxBadRecords":0}
//
// It travels on the same subject with the same headers as a record array
// (the idempotency key in IdempotencyKeyHeader, the reply inbox in
// ReplyToHeader); a body whose first non-blank byte is '{' is one
// (IsObjectRequest). The object is the job's whole payload (JSON Lines or
// one JSON array); SHA256 is the SHA-256 of its bytes, in lowercase hex.
// Bucket must be the principal's own bucket, Subjects.ObjectBucket: the
// intake reads it with its own permissions, so a request naming any other
// bucket is answered as not found and nothing is read.
type ObjectRequest struct {
	ObjectStore ObjectReference `json:"objectStore"`
	// Format is "jsonl" (the default when empty) or "json_array".
	Format string `json:"format,omitempty"`
	// MaxBadRecords is how many malformed or untransformable records the
	// job may skip (0, the default: the first one fails the job).
	MaxBadRecords int64 `json:"maxBadRecords,omitempty"`
}

// ObjectReference names one object and its digest.
type ObjectReference struct {
	Bucket string `json:"bucket"`
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
}

// Object request formats.
const (
	ObjectFormatJSONLines = "jsonl"
	ObjectFormatJSONArray = "json_array"
)

// MaxObjectNameBytes bounds ObjectReference.Name.
const MaxObjectNameBytes = 1024

var (
	bucketPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)
	sha256Pattern = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// IsObjectRequest reports whether body is an object request rather than a
// record array: its first byte after JSON white space is '{'. (A record
// array starts with '['; an object body was refused as etl_invalid_json
// before object requests existed, so no valid request changes meaning.)
func IsObjectRequest(body []byte) bool {
	b := bytes.TrimLeft(body, " \t\r\n")
	return len(b) > 0 && b[0] == '{'
}

// ParseObjectRequest decodes and checks an object request. It returns the
// request with Format defaulted, or codes.InvalidJSON for a body that is
// not exactly one JSON object of this shape (unknown or missing members,
// trailing data, a bucket outside [A-Za-z0-9_-], an empty or overlong
// name, a digest that is not 64 lowercase hex digits, another format, a
// negative maxBadRecords).
func ParseObjectRequest(body []byte) (ObjectRequest, string) {
	var r ObjectRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return ObjectRequest{}, codes.InvalidJSON
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ObjectRequest{}, codes.InvalidJSON
	}
	if r.Format == "" {
		r.Format = ObjectFormatJSONLines
	}
	ref := r.ObjectStore
	switch {
	case !bucketPattern.MatchString(ref.Bucket),
		ref.Name == "" || len(ref.Name) > MaxObjectNameBytes,
		!sha256Pattern.MatchString(ref.SHA256),
		r.Format != ObjectFormatJSONLines && r.Format != ObjectFormatJSONArray,
		r.MaxBadRecords < 0:
		return ObjectRequest{}, codes.InvalidJSON
	}
	return r, ""
}

// ObjectBucket is the Object Store bucket of principal's objects,
// "<P>_OBJECTS_<principal>" (<P> as in the stream names; the stream that
// holds it is "OBJ_<bucket>"). One bucket per principal because NATS
// permissions can bind a producer to a bucket (its stream and subjects) but
// not to object names inside one.
func (s Subjects) ObjectBucket(principal string) string {
	return s.streamName("OBJECTS_" + principal)
}

// LongRequests is implemented by a RequestHandler some of whose requests
// may take longer than RequestConsumerOptions.HandlerTimeout (an Object
// Store ingest). For a body it reports long, the consumer runs the handler
// without that deadline as long as the handler reports progress
// (KeepAlive) at least once per HandlerTimeout, tells the server every
// AckWait/3 that the message is in progress (so it is not redelivered
// meanwhile), and cancels the handler's context when the consumer stops
// (the message is then redelivered, to converge on the same job).
type LongRequests interface {
	IsLongRequest(body []byte) bool
}

// ErrStalled is the cause of a long request's context cancelled because its
// handler reported no progress (KeepAlive) for HandlerTimeout.
var ErrStalled = errors.New("long request made no progress")

type progressKey struct{}

// progress is a long request's last sign of life, in Unix nanoseconds.
type progress struct{ last atomic.Int64 }

func (p *progress) touch() { p.last.Store(time.Now().UnixNano()) }

// KeepAlive records that the long request handled under ctx made progress:
// the consumer keeps it for another HandlerTimeout. A no-op for any other
// context (a request that is not long, a test calling the handler
// directly).
func KeepAlive(ctx context.Context) {
	if p, ok := ctx.Value(progressKey{}).(*progress); ok {
		p.touch()
	}
}

// inProgresser is the part of a message a long request's watchdog uses.
type inProgresser interface{ InProgress() error }

// longContext returns the context of a long request: cancelled when parent
// (the consumer's run context) ends, or with cause ErrStalled once no
// KeepAlive came for stall; while neither happened, msg is reported in
// progress every beat. stop ends the watchdog and releases the context.
func longContext(parent context.Context, msg inProgresser, beat, stall time.Duration) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	p := &progress{}
	p.touch()
	ctx = context.WithValue(ctx, progressKey{}, p)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(beat)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if time.Since(time.Unix(0, p.last.Load())) > stall {
					cancel(ErrStalled)
					return
				}
				_ = msg.InProgress() // a lost one only risks a redelivery, which converges
			}
		}
	}()
	return ctx, func() {
		close(done)
		<-finished
		cancel(context.Canceled)
	}
}
