package events

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/mightyetl/mightyetl/client/backoff"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/startstop"
	"github.com/mightyetl/mightyetl/internal/tracing"
)

// ReplyToHeader names the inbox a producer wants the outcome of its request
// sent to. JetStream does not keep a message's own reply subject (that one
// receives the stream's PubAck), so the reply address travels as a header.
// Only a literal subject under the requester's own inbox prefix
// (ReplyInboxPrefix of the subject's principal, "_INBOX.<principal>.") is
// answered; a request naming any other subject is rejected with
// codes.ReplySubjectForbidden and never handled, so a producer cannot make the
// intake publish into another principal's inbox, the intake's own inboxes or
// any other subject.
const ReplyToHeader = "Mightyetl-Reply-To"

// ErrorCodeHeader is set on a reply that carries a problem; its value is
// the problem's errorCode.
const ErrorCodeHeader = "Mightyetl-Error-Code"

// IdempotencyKeyHeader carries a request's idempotency key, bare (the
// principal is the subject's last token): the HTTP Idempotency-Key rules
// apply (a raw key, or an RFC 9651 sf-string). The database decides
// idempotency per (principal, key).
//
// A request must not carry a Nats-Msg-Id: JetStream deduplicates Nats-Msg-Id
// across the whole stream, whoever published, before the intake sees the
// message, so any id one principal uses another could send first and have
// the server drop the original as a duplicate. The consumer rejects a request
// with a Nats-Msg-Id (codes.MsgIDForbidden), so every request it accepts is
// one the server could not have deduplicated against another principal's.
const IdempotencyKeyHeader = "Mightyetl-Idempotency-Key"

// PriorityHeader carries a request's priority, one digit 1 (highest) ..
// 4 (lowest), and NotBeforeHeader the earliest time its job may run (RFC
// 3339 with an offset): the HTTP submission's headers, with the same rules
// and rejections (codes.InvalidPriority, codes.InvalidNotBefore). Absent
// means priority 2, at once. Neither is part of the request's identity.
const (
	PriorityHeader  = "Mightyetl-Priority"
	NotBeforeHeader = "Mightyetl-Not-Before"
)

// ReplyInboxPrefix is the inbox prefix of principal's producers,
// "_INBOX.<principal>": a producer connects with
// nats.CustomInboxPrefix(ReplyInboxPrefix(principal)) and names a subject
// under it in ReplyToHeader (nc.NewInbox() does). Replies go nowhere else.
func ReplyInboxPrefix(principal string) string { return "_INBOX." + principal }

// NewReplyInbox returns a fresh unique inbox subject under principal's
// ReplyInboxPrefix, for a producer that does not use its connection's inbox
// prefix for replies.
func NewReplyInbox(principal string) string {
	return ReplyInboxPrefix(principal) + strings.TrimPrefix(nats.NewInbox(), "_INBOX")
}

// Request stream retention. Stated here and in docs/operations/nats.md.
const (
	// RequestsMaxAge is how long an unconsumed request waits in the stream.
	RequestsMaxAge = 24 * time.Hour
	// RequestsDuplicateWindow is the smallest window JetStream allows (zero
	// would mean its 2-minute default). It protects nothing: requests carry
	// no Nats-Msg-Id (IdempotencyKeyHeader), so the server never
	// deduplicates one, and idempotency is decided by the database per
	// (principal, key).
	RequestsDuplicateWindow = 100 * time.Millisecond
	// DefaultRequestsMaxBytes is the request stream's size limit when none is
	// configured: 1 GiB. New requests are refused (the producer's publish
	// fails) while the stream is full.
	DefaultRequestsMaxBytes = 1 << 30
	// DefaultRequestsMaxPerPrincipal is the limit of waiting requests of one
	// principal (one subject) when none is configured, lowered when the
	// stream could not hold RequestsPrincipalShares principals' worth of
	// them (RequestsLimits.WithDefaults). Further requests of that principal
	// are refused; other principals are not affected.
	DefaultRequestsMaxPerPrincipal = 100
	// RequestsPrincipalShares bounds one principal's part of the stream:
	// its waiting requests, each counted at its largest stored size, may
	// take at most 1/RequestsPrincipalShares of MaxBytes
	// (RequestsLimits.Validate). JetStream limits a subject by messages
	// only, so bytes are bounded through MaxPerPrincipal × MaxMsgSize: one
	// principal (or fewer than this many) can never fill the stream and
	// have discard-new refuse every other principal.
	RequestsPrincipalShares = 10
	// RequestStoreOverhead is what the file store may add to a message's
	// headers and body when it counts it against MaxBytes: its record
	// framing (34 bytes) and the subject, at most 4 KiB (the server's
	// default max_control_line bounds the publish line that carries it).
	RequestStoreOverhead = 4096 + 64
)

// RequestsLimits are the request stream's size limits. Zero values take the
// defaults noted.
type RequestsLimits struct {
	// MaxBytes caps the whole stream; zero means DefaultRequestsMaxBytes.
	MaxBytes int64
	// MaxPerPrincipal caps the messages of one subject, that is of one
	// principal; zero means DefaultRequestsMaxPerPrincipal, or
	// RequestsMaxPerPrincipalFor(MaxBytes, MaxMsgSize) when that is lower.
	MaxPerPrincipal int64
	// MaxMsgSize caps one message, headers and body; zero means the
	// server's max_payload (the request consumer resolves it on connect).
	MaxMsgSize int32
}

// WithDefaults returns l with a non-positive MaxBytes set to
// DefaultRequestsMaxBytes and a non-positive MaxPerPrincipal set to
// DefaultRequestsMaxPerPrincipal, or to RequestsMaxPerPrincipalFor when
// MaxMsgSize is known and that is lower (but at least 1: Validate then
// reports a stream too small for its message size).
func (l RequestsLimits) WithDefaults() RequestsLimits {
	l.MaxBytes = cmp.Or(max(l.MaxBytes, 0), DefaultRequestsMaxBytes)
	if l.MaxPerPrincipal <= 0 {
		l.MaxPerPrincipal = DefaultRequestsMaxPerPrincipal
		if l.MaxMsgSize > 0 {
			l.MaxPerPrincipal = max(min(l.MaxPerPrincipal, RequestsMaxPerPrincipalFor(l.MaxBytes, l.MaxMsgSize)), 1)
		}
	}
	return l
}

// RequestsMaxPerPrincipalFor is the largest MaxPerPrincipal a stream of
// maxBytes with messages of up to maxMsgSize bytes allows: the count whose
// bytes, each message at maxMsgSize plus RequestStoreOverhead, fit in
// 1/RequestsPrincipalShares of maxBytes. Zero means not even one message
// fits in a share.
func RequestsMaxPerPrincipalFor(maxBytes int64, maxMsgSize int32) int64 {
	return maxBytes / RequestsPrincipalShares / (int64(max(maxMsgSize, 0)) + RequestStoreOverhead)
}

// ErrPrincipalShareTooLarge reports RequestsLimits that let one principal
// hold more than 1/RequestsPrincipalShares of the request stream.
var ErrPrincipalShareTooLarge = errors.New("one principal's waiting requests could take more than its share of the request stream")

// Validate checks l after WithDefaults with MaxMsgSize known: one
// principal at its MaxPerPrincipal limit, every message at MaxMsgSize,
// must hold at most 1/RequestsPrincipalShares of MaxBytes. It returns nil
// for a zero MaxMsgSize (the limit is the server's, checked once known),
// and otherwise an error wrapping ErrPrincipalShareTooLarge that names the
// largest MaxPerPrincipal allowed and the smallest MaxBytes that allows l's.
func (l RequestsLimits) Validate() error {
	if l.MaxMsgSize <= 0 || l.MaxPerPrincipal <= RequestsMaxPerPrincipalFor(l.MaxBytes, l.MaxMsgSize) {
		return nil
	}
	return fmt.Errorf("%w: %d requests of up to %d bytes each; allow at most %d per principal, or at least %d stream bytes",
		ErrPrincipalShareTooLarge, l.MaxPerPrincipal, l.MaxMsgSize,
		RequestsMaxPerPrincipalFor(l.MaxBytes, l.MaxMsgSize), l.MinStreamBytes())
}

// MinStreamBytes is the smallest stream size in which l's MaxPerPrincipal
// messages of MaxMsgSize take at most 1/RequestsPrincipalShares.
func (l RequestsLimits) MinStreamBytes() int64 {
	return l.MaxPerPrincipal * (int64(max(l.MaxMsgSize, 0)) + RequestStoreOverhead) * RequestsPrincipalShares
}

// Request is one request message as its RequestHandler sees it.
type Request struct {
	// Principal is the last subject token (NATS permissions decide who may
	// publish there).
	Principal string
	// IdempotencyKey is the IdempotencyKeyHeader value, possibly empty (the
	// handler validates it with the HTTP header's rules).
	IdempotencyKey string
	// Priority and NotBefore are the values of PriorityHeader and
	// NotBeforeHeader, nil when absent (the handler validates them with the
	// HTTP headers' rules).
	Priority, NotBefore []string
	// Body is the raw record array (or an object request).
	Body []byte
}

// RequestHandler turns one request message into a job. It is OUR interface,
// implemented by the intake. The handler must commit before returning
// success.
//
// Results: err != nil means the request failed internally (database
// unavailable, or anything else unexpected): the message is redelivered after
// a growing delay, and terminated with a codes.RequestDeliveriesExhausted rejection on
// its RequestConsumerOptions.MaxDeliveries-th delivery. Otherwise problemCode != "" means the request
// is invalid and never will be valid: the message is terminated and a
// rejection published; reply may hold the problem document. Otherwise the
// job is committed; reply holds the job representation. A redelivered
// message must converge on the same job. Called concurrently.
type RequestHandler interface {
	HandleRequest(ctx context.Context, req Request) (reply []byte, problemCode string, err error)
}

// Rejection is the body of a "<p>.rejections" message: payload-free, no
// principal, no key, no hash.
type Rejection struct {
	ErrorCode string `json:"errorCode"`
}

// RequestConsumerOptions tunes a RequestConsumer. Zero values take the
// defaults noted.
type RequestConsumerOptions struct {
	// Durable is the durable consumer's name; empty means
	// DefaultRequestDurable.
	Durable string
	// Concurrency is how many requests are handled at once
	// (MIGHTYETL_NATS_REQUEST_CONCURRENCY); zero means
	// DefaultRequestConcurrency.
	// Each is one goroutine waiting on the intake's group commit, so many
	// requests share a commit; the consumer pulls up to this many at a time
	// and allows 4x as many unacknowledged.
	Concurrency int
	// AckWait is how long the server waits for an ack before redelivering;
	// zero means DefaultRequestAckWait. HandlerTimeout must be shorter.
	AckWait time.Duration
	// HandlerTimeout bounds one HandleRequest call; zero means
	// DefaultRequestHandlerTimeout.
	HandlerTimeout time.Duration
	// RetryDelay is the redelivery delay after the first internal failure;
	// zero means DefaultRequestRetryDelay. It doubles with every further
	// delivery up to
	// MaxRetryDelay.
	RetryDelay time.Duration
	// MaxRetryDelay caps the redelivery delay; zero means
	// DefaultRequestMaxRetryDelay.
	MaxRetryDelay time.Duration
	// MaxDeliveries is how many deliveries a request that keeps failing
	// internally gets before it is terminated with a codes.RequestDeliveriesExhausted
	// rejection; zero means DefaultRequestMaxDeliveries. The count is the
	// server's delivery count, so deliveries that ended without an answer
	// (a crashed or stopped intake, an expired ack wait) count too.
	MaxDeliveries int
	// MaxRequestBytes caps a request message in the stream; zero means the
	// server's max_payload.
	MaxRequestBytes int32
	// StreamMaxBytes and StreamMaxPerPrincipal are the request stream's
	// limits (RequestsLimits); zero means the defaults there. Together with
	// MaxRequestBytes they must pass RequestsLimits.Validate.
	StreamMaxBytes        int64
	StreamMaxPerPrincipal int64
	// StreamReplicas is the request stream's replica count
	// (MIGHTYETL_NATS_STREAM_REPLICAS); zero means 1. More than 1 needs a
	// JetStream cluster; an existing stream is updated to it.
	StreamReplicas int
	// SetupRetry is the pause between attempts to create the stream and
	// consumer while NATS is unavailable; zero means
	// DefaultRequestSetupRetry.
	SetupRetry time.Duration
	// Gate, when not nil, pauses consumption while it reports the schema
	// incompatible (the schema-compatibility contract): the consumer
	// fetches nothing, so requests wait in the stream and no delivery is
	// counted against MaxDeliveries; requests already fetched are handled
	// (or, not yet handed to a handler, redelivered after AckWait). Nil
	// never pauses.
	Gate Gate
}

// Gate is the verdict RequestConsumerOptions.Gate pauses on
// (schemagate.Gate implements it).
type Gate interface {
	// Watch returns whether consuming is allowed and a channel closed at
	// the verdict's next change. Safe for concurrent use.
	Watch() (open bool, changed <-chan struct{})
}

// WithDefaults returns o with every empty or non-positive field that has a
// default set to it (the DefaultRequest* constants); MaxRetryDelay is
// raised to RetryDelay when below it.
func (o RequestConsumerOptions) WithDefaults() RequestConsumerOptions {
	o.Durable = cmp.Or(o.Durable, DefaultRequestDurable)
	o.Concurrency = cmp.Or(max(o.Concurrency, 0), DefaultRequestConcurrency)
	o.AckWait = cmp.Or(max(o.AckWait, 0), DefaultRequestAckWait)
	o.HandlerTimeout = cmp.Or(max(o.HandlerTimeout, 0), DefaultRequestHandlerTimeout)
	o.RetryDelay = cmp.Or(max(o.RetryDelay, 0), DefaultRequestRetryDelay)
	o.MaxRetryDelay = cmp.Or(max(o.MaxRetryDelay, 0), DefaultRequestMaxRetryDelay)
	if o.MaxRetryDelay < o.RetryDelay {
		o.MaxRetryDelay = o.RetryDelay
	}
	o.MaxDeliveries = cmp.Or(max(o.MaxDeliveries, 0), DefaultRequestMaxDeliveries)
	o.SetupRetry = cmp.Or(max(o.SetupRetry, 0), DefaultRequestSetupRetry)
	return o
}

// Defaults of RequestConsumerOptions.
const (
	// DefaultRequestDurable is the durable consumer's name.
	DefaultRequestDurable = "mightyetl-intake"
	// DefaultRequestConcurrency is how many requests are handled at once
	// (MIGHTYETL_NATS_REQUEST_CONCURRENCY).
	DefaultRequestConcurrency = 256
	// DefaultRequestAckWait is the server's wait for an ack before it
	// redelivers.
	DefaultRequestAckWait = 30 * time.Second
	// DefaultRequestHandlerTimeout bounds one HandleRequest call.
	DefaultRequestHandlerTimeout = 20 * time.Second
	// DefaultRequestRetryDelay is the redelivery delay after the first
	// internal failure.
	DefaultRequestRetryDelay = time.Second
	// DefaultRequestMaxRetryDelay caps the redelivery delay.
	DefaultRequestMaxRetryDelay = time.Minute
	// DefaultRequestMaxDeliveries is RequestConsumerOptions.MaxDeliveries
	// when none is configured (MIGHTYETL_NATS_REQUEST_MAX_DELIVERIES). With
	// the default delays (1s doubling to 1 minute) a request is retried for
	// about 24 minutes before it is rejected.
	DefaultRequestMaxDeliveries = 30
	// DefaultRequestSetupRetry is the pause between attempts to create the
	// stream and consumer while NATS is unavailable.
	DefaultRequestSetupRetry = 2 * time.Second
)

// RequestsStreamConfig is the request stream for the subjects s: name
// "<P>_REQUESTS", subjects "<p>.requests.>", work-queue retention (a
// message leaves once acked or terminated), age limit RequestsMaxAge, size
// limits l (whole stream, per principal, per message), new messages refused
// when full, both for the stream and for one principal's subject (so a
// limit never discards a waiting request), file storage, duplicate window
// RequestsDuplicateWindow (requests carry no Nats-Msg-Id).
func RequestsStreamConfig(s Subjects, l RequestsLimits) jetstream.StreamConfig {
	l = l.WithDefaults()
	return jetstream.StreamConfig{
		Name:                 s.RequestsStream(),
		Description:          "mightyETL job submissions (last token = principal, key in Mightyetl-Idempotency-Key, no Nats-Msg-Id)",
		Subjects:             []string{s.RequestsAll()},
		Retention:            jetstream.WorkQueuePolicy,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
		MaxAge:               RequestsMaxAge,
		MaxBytes:             l.MaxBytes,
		MaxMsgsPerSubject:    l.MaxPerPrincipal,
		MaxMsgSize:           l.MaxMsgSize,
		Duplicates:           RequestsDuplicateWindow,
		Storage:              jetstream.FileStorage,
		Replicas:             1,
	}
}

// RequestConsumer feeds request messages from the durable pull consumer to
// a RequestHandler and acknowledges each only after the handler returned.
// Create it with NewRequestConsumer; run it with Start and Stop.
//
// The consumer itself rejects, before (or instead of) the handler, a
// request whose subject does not end in exactly one principal token
// (codes.PrincipalRequired), whose ReplyToHeader is not a literal subject
// under its principal's ReplyInboxPrefix (codes.ReplySubjectForbidden: not
// handled and no reply), that carries a Nats-Msg-Id (codes.MsgIDForbidden,
// see IdempotencyKeyHeader), or that failed
// internally on RequestConsumerOptions.MaxDeliveries deliveries
// (codes.RequestDeliveriesExhausted). Each rejection is published on
// "<p>.rejections" and the message is terminated.
type RequestConsumer struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	subjects Subjects
	h        RequestHandler
	log      *slog.Logger
	m        *metrics.Events
	opts     RequestConsumerOptions

	ss startstop.Base
}

// NewRequestConsumer returns a consumer of "<prefix>.requests.>" that calls
// h. log and m may be nil. It fails on a nil connection or handler, an
// invalid prefix, or stream limits that fail RequestsLimits.Validate
// (ErrPrincipalShareTooLarge; with a zero MaxRequestBytes that check waits
// for the server's max_payload, and the stream is not set up while it
// fails).
func NewRequestConsumer(nc *nats.Conn, prefix string, h RequestHandler, log *slog.Logger, m *metrics.Events, opts RequestConsumerOptions) (*RequestConsumer, error) {
	if nc == nil || h == nil {
		return nil, errors.New("new request consumer: connection and handler are required")
	}
	s, err := NewSubjects(prefix)
	if err != nil {
		return nil, fmt.Errorf("new request consumer: %w", err)
	}
	opts = opts.WithDefaults()
	if opts.HandlerTimeout >= opts.AckWait {
		return nil, errors.New("new request consumer: handler timeout must be shorter than ack wait")
	}
	if err := opts.limits(0).Validate(); err != nil {
		return nil, fmt.Errorf("new request consumer: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("new request consumer: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if m == nil {
		m = metrics.NewEvents(nil)
	}
	return &RequestConsumer{nc: nc, js: js, subjects: s, h: h, log: log.With("component", "request_consumer"), m: m, opts: opts}, nil
}

// Start runs the consumer in the background until Stop or until ctx is
// cancelled. It does not wait for NATS: the stream and the durable consumer
// are created (or updated) as soon as NATS answers, and consumption survives
// reconnects. A consumer runs once (internal/startstop): a second Start
// returns startstop.ErrAlreadyStarted, a Start after Stop
// startstop.ErrStopped.
func (c *RequestConsumer) Start(ctx context.Context) error {
	return c.ss.Start(ctx, func(ctx context.Context) (startstop.StopFunc, error) {
		runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		stopOnParent := context.AfterFunc(ctx, cancel)
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.run(runCtx)
		}()
		return func(context.Context) error {
			stopOnParent()
			cancel()
			<-done // requests in flight end within HandlerTimeout
			return nil
		}, nil
	})
}

// Stop stops fetching, lets requests in flight finish (each bounded by
// HandlerTimeout) and waits until the consumer is done or ctx ends (then it
// returns ctx.Err() and the consumer still stops in the background; a later
// Stop waits for it). Requests fetched but not started are redelivered by
// the server. Safe to call twice, concurrently, and before Start (a later
// Start then returns startstop.ErrStopped).
func (c *RequestConsumer) Stop(ctx context.Context) error {
	return c.ss.Stop(ctx)
}

// setup creates or updates the stream and the durable consumer.
func (c *RequestConsumer) setup(ctx context.Context) (jetstream.Consumer, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// The server's max_payload is known once connected; an unconnected
	// connection fails the stream look-up below anyway.
	limits := c.opts.limits(int32(min(c.nc.MaxPayload(), math.MaxInt32)))
	if err := limits.Validate(); err != nil {
		return nil, fmt.Errorf("request stream limits: %w", err)
	}
	if _, err := EnsureStream(ctx, c.js, WithReplicas(RequestsStreamConfig(c.subjects, limits), c.opts.StreamReplicas)); err != nil {
		return nil, err
	}
	cons, err := c.js.CreateOrUpdateConsumer(ctx, c.subjects.RequestsStream(), jetstream.ConsumerConfig{
		Durable:     c.opts.Durable,
		Description: "mightyETL intake: acks after the job's transaction commits",
		AckPolicy:   jetstream.AckExplicitPolicy,
		AckWait:     c.opts.AckWait,
		// Unlimited on the server: the consumer counts deliveries itself
		// (MaxDeliveries) so that it can terminate the message with a
		// rejection; a server-side limit would leave it in the work queue,
		// silently, until its age limit.
		MaxDeliver:    -1,
		MaxAckPending: 4 * c.opts.Concurrency,
		FilterSubject: c.subjects.RequestsAll(),
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure request consumer: %w", err)
	}
	return cons, nil
}

// limits are the request stream's limits with defaults applied; a zero
// MaxRequestBytes is taken as serverMaxPayload (zero when unknown).
func (o RequestConsumerOptions) limits(serverMaxPayload int32) RequestsLimits {
	return RequestsLimits{
		MaxBytes: o.StreamMaxBytes, MaxPerPrincipal: o.StreamMaxPerPrincipal,
		MaxMsgSize: cmp.Or(max(o.MaxRequestBytes, 0), serverMaxPayload),
	}.WithDefaults()
}

// run sets up, consumes until ctx ends or the consumer disappears, and
// starts over.
func (c *RequestConsumer) run(ctx context.Context) {
	failing := false
	for ctx.Err() == nil {
		cons, err := c.setup(ctx)
		if err != nil {
			if !failing && ctx.Err() == nil {
				c.log.Warn("request stream not ready; retrying", "error_class", pg.ErrorClass(err))
			}
			failing = true
			select {
			case <-ctx.Done():
			case <-time.After(c.opts.SetupRetry):
			}
			continue
		}
		if failing {
			c.log.Info("request stream ready")
			failing = false
		}
		c.consume(ctx, cons)
	}
}

// consume dispatches messages to Concurrency workers until ctx ends or the
// consumer is deleted. Each worker handles one message at a time, so at most
// Concurrency messages are in the handler and a few more in the buffer.
func (c *RequestConsumer) consume(ctx context.Context, cons jetstream.Consumer) {
	gateChanged, ok := c.awaitGate(ctx)
	if !ok {
		return
	}
	work := make(chan jetstream.Msg)
	lost := make(chan struct{})
	var lostOnce sync.Once
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		select {
		case work <- msg:
		case <-ctx.Done():
			// Not handled: the server redelivers it after AckWait.
		case <-lost:
		}
	},
		jetstream.PullMaxMessages(c.opts.Concurrency),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
				lostOnce.Do(func() { close(lost) })
			}
		}))
	if err != nil {
		c.log.Warn("request consumer could not start; retrying", "error_class", pg.ErrorClass(err))
		select {
		case <-ctx.Done():
		case <-time.After(c.opts.SetupRetry):
		}
		return
	}
	var wg sync.WaitGroup
	for range c.opts.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case <-lost:
					return
				case msg := <-work:
					c.handle(ctx, msg)
				}
			}
		}()
	}
	select {
	case <-ctx.Done():
	case <-lost:
		c.log.Warn("request consumer deleted; recreating it")
	case <-gateChanged:
		// The schema became incompatible: stop fetching; run starts over
		// and awaitGate waits for it to become compatible again.
		lostOnce.Do(func() { close(lost) })
	}
	cc.Stop()
	<-cc.Closed()
	wg.Wait()
}

// awaitGate waits until the gate (if any) is open and returns the channel
// closed at its next change (nil without a gate); false when ctx ended
// first.
func (c *RequestConsumer) awaitGate(ctx context.Context) (<-chan struct{}, bool) {
	if c.opts.Gate == nil {
		return nil, true
	}
	for {
		open, changed := c.opts.Gate.Watch()
		if open {
			return changed, true
		}
		select {
		case <-ctx.Done():
			return nil, false
		case <-changed:
		}
	}
}

// handle decides one message and settles it: Ack after success, Term plus
// rejection for a problem, Nak with a growing delay for an internal failure,
// Term plus rejection once a message has had MaxDeliveries deliveries. The
// handler's context outlives Stop (bounded by HandlerTimeout) so a commit in
// progress is not torn down half-way; a long request's (LongRequests) ends
// at Stop instead, and the message comes back to converge on its job.
func (c *RequestConsumer) handle(ctx context.Context, msg jetstream.Msg) {
	// A long request (LongRequests) runs as long as it makes progress and
	// the consumer runs (lctx); HandlerTimeout then bounds its settlement,
	// from the moment the handler returned.
	long := false
	if lr, ok := c.h.(LongRequests); ok {
		long = lr.IsLongRequest(msg.Data())
	}
	hctx := context.WithoutCancel(ctx)
	if !long {
		var cancel context.CancelFunc
		hctx, cancel = context.WithTimeout(hctx, c.opts.HandlerTimeout)
		defer cancel()
	}
	var (
		reply []byte
		code  string
		err   error
	)
	// The span continues a traceparent the producer put in the headers.
	hctx, span := tracing.StartConsumer(hctx, "nats.request.consume", msg.Headers())
	defer func() {
		if code != "" {
			tracing.Fail(span, code) // a finite rejection or errorCode
		} else if err != nil {
			tracing.Fail(span, "")
		}
		span.End()
	}()
	delivered := uint64(1)
	if md, merr := msg.Metadata(); merr == nil {
		delivered = md.NumDelivered
	}
	principal, ok := c.subjects.principalOf(msg.Subject())
	replyTo := msg.Headers().Get(ReplyToHeader)
	key := msg.Headers().Get(IdempotencyKeyHeader)
	switch {
	case !ok:
		code = codes.PrincipalRequired
	case replyTo != "" && !replyAllowed(principal, replyTo):
		code = codes.ReplySubjectForbidden
	case delivered > uint64(c.opts.MaxDeliveries):
		// Earlier deliveries ended without a settlement (a crash, a stop,
		// an expired ack wait): do not run it again.
		code = codes.RequestDeliveriesExhausted
	case msg.Headers().Get(jetstream.MsgIDHeader) != "":
		// Deduplicated stream-wide by the server: whoever sent the id
		// first decided whether this message was stored.
		code = codes.MsgIDForbidden
	default:
		req := Request{Principal: principal, IdempotencyKey: key, Body: msg.Data(),
			Priority: msg.Headers().Values(PriorityHeader), NotBefore: msg.Headers().Values(NotBeforeHeader)}
		if long {
			lctx, stop := longContext(trace.ContextWithSpan(ctx, span), msg, c.opts.AckWait/3, c.opts.HandlerTimeout)
			reply, code, err = c.h.HandleRequest(lctx, req)
			stop()
			sctx, scancel := context.WithTimeout(hctx, c.opts.HandlerTimeout)
			defer scancel()
			hctx = sctx
		} else {
			reply, code, err = c.h.HandleRequest(hctx, req)
		}
		if err != nil && delivered >= uint64(c.opts.MaxDeliveries) {
			reply, code, err = nil, codes.RequestDeliveriesExhausted, nil
		}
	}
	switch {
	case err != nil:
		if nerr := msg.NakWithDelay(c.retryDelay(delivered)); nerr != nil {
			c.m.Requests.WithLabelValues(metrics.RequestAckFailed).Inc()
			return
		}
		c.m.Requests.WithLabelValues(metrics.RequestRetried).Inc()
	case code != "":
		body, _ := json.Marshal(Rejection{ErrorCode: code})
		if len(reply) == 0 {
			reply = body
		}
		if ok && code != codes.ReplySubjectForbidden {
			c.answer(principal, replyTo, reply, code)
		}
		_ = c.nc.Publish(c.subjects.Rejections(), body) // advisory; the reply carries it too
		if terr := msg.Term(); terr != nil {            // not TermWithReason: servers before 2.10 ignore a reasoned term
			c.m.Requests.WithLabelValues(metrics.RequestAckFailed).Inc()
			return
		}
		c.m.Requests.WithLabelValues(metrics.RequestRejected).Inc()
	default:
		// DoubleAck waits for the server to confirm, so the reply is only sent
		// for a message that will not be redelivered.
		if aerr := msg.DoubleAck(hctx); aerr != nil {
			c.m.Requests.WithLabelValues(metrics.RequestAckFailed).Inc()
			return
		}
		c.m.Requests.WithLabelValues(metrics.RequestAccepted).Inc()
		c.answer(principal, replyTo, reply, "")
	}
}

// retryDelay is the redelivery delay after the delivered-th delivery failed:
// RetryDelay doubled for each earlier delivery, at most MaxRetryDelay.
func (c *RequestConsumer) retryDelay(delivered uint64) time.Duration {
	return backoff.Capped(c.opts.RetryDelay, c.opts.MaxRetryDelay, int(min(delivered, math.MaxInt32)))
}

// answer sends reply to the requester's inbox to, when it is one
// (replyAllowed). Best effort: a producer that misses it can look the job up
// by its key.
func (c *RequestConsumer) answer(principal, to string, reply []byte, code string) {
	if to == "" || !replyAllowed(principal, to) {
		return
	}
	out := nats.NewMsg(to)
	out.Data = reply
	if code != "" {
		out.Header.Set(ErrorCodeHeader, code)
	}
	_ = c.nc.PublishMsg(out)
}

// replyAllowed accepts a literal subject under principal's inbox prefix,
// "_INBOX.<principal>.<one or more tokens>": no wildcards, no empty tokens,
// no white space, at most 256 characters.
func replyAllowed(principal, s string) bool {
	if principal == "" || len(s) > 256 {
		return false
	}
	rest, ok := strings.CutPrefix(s, ReplyInboxPrefix(principal)+".")
	if !ok || rest == "" {
		return false
	}
	for _, tok := range strings.Split(rest, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n*>") {
			return false
		}
	}
	return true
}
