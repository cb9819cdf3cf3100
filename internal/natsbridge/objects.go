package natsbridge

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/intake"
)

// DefaultObjectIngests is Options.ObjectIngests when none is configured
// (MIGHTYETL_NATS_OBJECT_INGESTS): one Object Store object is read into
// PostgreSQL at a time per intake.
const DefaultObjectIngests = 1

// ErrObjectIngestsBusy is the internal failure of an object request that
// found every ingest slot (Options.ObjectIngests) taken: the consumer
// redelivers it later, and meanwhile its handler slot serves other
// requests, so a large object never holds up small requests.
var ErrObjectIngestsBusy = errors.New("every object ingest slot is busy")

// objectRequests is the bridge's events.RequestHandler: record arrays go
// to the intake as before (intake.NATSRequests); an object request
// (events.ObjectRequest) is a long request whose object is streamed from
// the principal's Object Store bucket into an upload and submitted as a
// chunked job (intake.Service.SubmitObject), at most cap(slots) at once.
type objectRequests struct {
	records  intake.NATSRequests
	js       jetstream.JetStream
	subjects events.Subjects
	slots    chan struct{}
}

// NewRequestHandler returns the handler the bridge's request consumer runs
// for svc (events.RequestHandler, also events.LongRequests): a record array
// goes to the intake as intake.NATSRequests does; an object request
// (events.ObjectRequest) streams its object from the principal's Object
// Store bucket (events.Subjects.ObjectBucket under prefix) over nc into
// PostgreSQL and submits it as a chunked job (intake.Service.SubmitObject),
// at most objectIngests objects at once (zero means DefaultObjectIngests).
func NewRequestHandler(nc *nats.Conn, svc *intake.Service, prefix string, objectIngests int) (events.RequestHandler, error) {
	return newObjectRequests(nc, intake.NATSRequests{Service: svc}, prefix, cmp.Or(max(objectIngests, 0), DefaultObjectIngests))
}

func newObjectRequests(nc *nats.Conn, records intake.NATSRequests, prefix string, ingests int) (*objectRequests, error) {
	s, err := events.NewSubjects(prefix)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return &objectRequests{records: records, js: js, subjects: s, slots: make(chan struct{}, max(ingests, 1))}, nil
}

// IsLongRequest: an object request runs as long as its object streams
// (events.LongRequests).
func (h *objectRequests) IsLongRequest(body []byte) bool { return events.IsObjectRequest(body) }

// HandleRequest implements events.RequestHandler.
// An object request's job is a large job, which takes the default priority
// at once: its PriorityHeader and NotBeforeHeader are not read.
func (h *objectRequests) HandleRequest(ctx context.Context, r events.Request) ([]byte, string, error) {
	principal, key, body := r.Principal, r.IdempotencyKey, r.Body
	if !events.IsObjectRequest(body) {
		return h.records.HandleRequest(ctx, intake.NATSRequest(r))
	}
	req, code := events.ParseObjectRequest(body)
	if code != "" {
		return nil, code, nil
	}
	ref := req.ObjectStore
	src := &objectSource{js: h.js, bucket: ref.Bucket, name: ref.Name, slots: h.slots}
	if ref.Bucket != h.subjects.ObjectBucket(principal) {
		// The intake reads with its own permissions: only the principal's
		// own bucket, which NATS permissions let only that principal
		// write, is ever opened. Any other is answered as absent.
		src.forbidden = true
	}
	return h.records.HandleObject(ctx, principal, key, intake.ObjectSubmission{
		Format: req.Format, MaxBadRecords: req.MaxBadRecords, SHA256: ref.SHA256, Source: src,
		// The object's reader keeps the request alive while bytes flow;
		// this, while the stored payload is verified at submission.
		KeepAlive: func() { events.KeepAlive(ctx) },
	})
}

// objectSource opens one object of an Object Store bucket as a stream
// (intake.ObjectSource), holding an ingest slot until the stream is closed.
type objectSource struct {
	js           jetstream.JetStream
	bucket, name string
	slots        chan struct{}
	forbidden    bool // not the principal's bucket: never opened
}

// Open takes an ingest slot (ErrObjectIngestsBusy when none is free), looks
// the object up and starts reading it (nats.go's ordered consumer on the
// object's chunks: the bytes flow through a pipe as they are read, never
// whole in memory). An absent bucket or object, a deleted object, or a
// link to another bucket is intake.ErrObjectNotFound.
func (s *objectSource) Open(ctx context.Context) (intake.ObjectStream, error) {
	if s.forbidden {
		return intake.ObjectStream{}, intake.ErrObjectNotFound
	}
	select {
	case s.slots <- struct{}{}:
	default:
		return intake.ObjectStream{}, ErrObjectIngestsBusy
	}
	release := sync.OnceFunc(func() { <-s.slots })
	obs, err := s.js.ObjectStore(ctx, s.bucket)
	if err != nil {
		release()
		if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			return intake.ObjectStream{}, intake.ErrObjectNotFound
		}
		return intake.ObjectStream{}, fmt.Errorf("open object store: %w", err)
	}
	res, err := obs.Get(ctx, s.name)
	if err != nil {
		release()
		if errors.Is(err, jetstream.ErrObjectNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) ||
			errors.Is(err, jetstream.ErrStreamNotFound) {
			return intake.ObjectStream{}, intake.ErrObjectNotFound
		}
		return intake.ObjectStream{}, fmt.Errorf("get object: %w", err)
	}
	info, err := res.Info()
	// Get follows links, also into other buckets: only an object of this
	// bucket is read.
	if err != nil || info == nil || info.Bucket != s.bucket {
		_ = res.Close()
		release()
		if err != nil {
			return intake.ObjectStream{}, fmt.Errorf("get object: %w", err)
		}
		return intake.ObjectStream{}, intake.ErrObjectNotFound
	}
	stream := intake.ObjectStream{Body: &objectBody{ctx: ctx, r: res, release: release}, Size: int64(info.Size)}
	if sum, derr := jetstream.DecodeObjectDigest(info.Digest); derr == nil && len(sum) == 32 {
		stream.SHA256 = hex.EncodeToString(sum)
	}
	return stream, nil
}

// objectBody is an object's byte stream: each read that returns bytes
// tells the request consumer the ingest is making progress
// (events.KeepAlive); Close releases the ingest slot.
type objectBody struct {
	ctx     context.Context
	r       jetstream.ObjectResult
	release func()
}

func (b *objectBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if n > 0 {
		events.KeepAlive(b.ctx)
	}
	if errors.Is(err, jetstream.ErrDigestMismatch) {
		// The bytes read differ from the digest the object was stored
		// with: what the producer referenced is not what was read.
		return n, intake.ErrUploadDigestMismatch
	}
	return n, err
}

func (b *objectBody) Close() error {
	defer b.release()
	return b.r.Close()
}

var _ io.ReadCloser = (*objectBody)(nil)

// Compile-time checks.
var (
	_ events.RequestHandler = (*objectRequests)(nil)
	_ events.LongRequests   = (*objectRequests)(nil)
)
