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

// RequestMsgID is the Nats-Msg-Id a producer sets on a request:
// "<principal>:<idempotency key>", principal being the request subject's last
// token. JetStream deduplicates Nats-Msg-Id per stream, not per subject; the
// principal qualification keeps two principals' equal keys apart inside the
// duplicate window. The consumer rejects a request whose id is not qualified
// by its own subject's principal (codes.MsgIDNotQualified) and hands the
// handler the key alone.
func RequestMsgID(principal, key string) string { return principal + ":" + key }

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
	// RequestsDuplicateWindow is the smallest window JetStream allows.
	// Idempotency is decided by the database per (principal, key); ids are
	// principal-qualified (RequestMsgID), and the window stays minimal so a
	// producer that forges another principal's id (the server deduplicates
	// before the consumer can reject it) can shadow that principal's request
	// for at most this long.
	RequestsDuplicateWindow = 100 * time.Millisecond
	// DefaultRequestsMaxBytes is the request stream's size limit when none is
	// configured: 1 GiB. New requests are refused (the producer's publish
	// fails) while the stream is full.
	DefaultRequestsMaxBytes = 1 << 30
	// DefaultRequestsMaxPerPrincipal is the limit of waiting requests of one
	// principal (one subject) when none is configured. Further requests of
	// that principal are refused; other principals are not affected.
	DefaultRequestsMaxPerPrincipal = 10000
)

// RequestsLimits are the request stream's size limits. Zero values take the
// defaults noted.
type RequestsLimits struct {
	// MaxBytes caps the whole stream; zero means DefaultRequestsMaxBytes.
	MaxBytes int64
	// MaxPerPrincipal caps the messages of one subject, that is of one
	// principal; zero means DefaultRequestsMaxPerPrincipal.
	MaxPerPrincipal int64
	// MaxMsgSize caps one message; zero means the server's max_payload.
	MaxMsgSize int32
}

// WithDefaults returns l with a non-positive MaxBytes or MaxPerPrincipal
// set to its Default* constant.
func (l RequestsLimits) WithDefaults() RequestsLimits {
	l.MaxBytes = cmp.Or(max(l.MaxBytes, 0), DefaultRequestsMaxBytes)
	l.MaxPerPrincipal = cmp.Or(max(l.MaxPerPrincipal, 0), DefaultRequestsMaxPerPrincipal)
	return l
}

// RequestHandler turns one request message into a job. It is OUR interface,
// implemented by the intake.
//
// principal is the last subject token (NATS permissions decide who may
// publish there); idempotencyKey is the Nats-Msg-Id header, possibly empty
// (the handler validates it with the HTTP header's rules); body is the raw
// record array. The handler must commit before returning success.
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
	HandleRequest(ctx context.Context, principal, idempotencyKey string, body []byte) (reply []byte, problemCode string, err error)
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
	// limits (RequestsLimits); zero means the defaults there.
	StreamMaxBytes        int64
	StreamMaxPerPrincipal int64
	// SetupRetry is the pause between attempts to create the stream and
	// consumer while NATS is unavailable; zero means
	// DefaultRequestSetupRetry.
	SetupRetry time.Duration
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
// RequestsDuplicateWindow.
func RequestsStreamConfig(s Subjects, l RequestsLimits) jetstream.StreamConfig {
	l = l.WithDefaults()
	return jetstream.StreamConfig{
		Name:                 s.RequestsStream(),
		Description:          "mightyETL job submissions (last token = principal, Nats-Msg-Id = <principal>:<idempotency key>)",
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
// handled and no reply), whose Nats-Msg-Id is not RequestMsgID(principal,
// key) for the subject's principal (codes.MsgIDNotQualified), or that failed
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
// h. log and m may be nil. It fails on a nil connection or handler or an
// invalid prefix.
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
	limits := RequestsLimits{MaxBytes: c.opts.StreamMaxBytes, MaxPerPrincipal: c.opts.StreamMaxPerPrincipal, MaxMsgSize: c.opts.MaxRequestBytes}
	if _, err := EnsureStream(ctx, c.js, RequestsStreamConfig(c.subjects, limits)); err != nil {
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
	}
	cc.Stop()
	<-cc.Closed()
	wg.Wait()
}

// handle decides one message and settles it: Ack after success, Term plus
// rejection for a problem, Nak with a growing delay for an internal failure,
// Term plus rejection once a message has had MaxDeliveries deliveries. The
// handler's context outlives Stop (bounded by HandlerTimeout) so a commit in
// progress is not torn down half-way.
func (c *RequestConsumer) handle(ctx context.Context, msg jetstream.Msg) {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.HandlerTimeout)
	defer cancel()
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
	key, qualified := requestKey(principal, msg.Headers().Get(jetstream.MsgIDHeader))
	switch {
	case !ok:
		code = codes.PrincipalRequired
	case replyTo != "" && !replyAllowed(principal, replyTo):
		code = codes.ReplySubjectForbidden
	case delivered > uint64(c.opts.MaxDeliveries):
		// Earlier deliveries ended without a settlement (a crash, a stop,
		// an expired ack wait): do not run it again.
		code = codes.RequestDeliveriesExhausted
	case !qualified:
		code = codes.MsgIDNotQualified
	default:
		reply, code, err = c.h.HandleRequest(hctx, principal, key, msg.Data())
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

// requestKey returns the idempotency key of a Nats-Msg-Id qualified by
// principal (RequestMsgID), and false when msgID is not qualified by it. The
// key itself is validated by the handler.
func requestKey(principal, msgID string) (string, bool) {
	if principal == "" {
		return "", false
	}
	return strings.CutPrefix(msgID, principal+":")
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
