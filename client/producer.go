package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATS conventions of the request intake (docs/operations/nats.md).
const (
	// DefaultSubjectPrefix is MIGHTYETL_NATS_SUBJECT_PREFIX's default.
	DefaultSubjectPrefix = "mightyetl"
	// ReplyToHeader names the inbox the intake answers a request on.
	ReplyToHeader = "Mightyetl-Reply-To"
	// ErrorCodeHeader is set on an answer that carries a problem.
	ErrorCodeHeader = "Mightyetl-Error-Code"
	// IdempotencyKeyHeader carries a request's idempotency key, bare: the
	// principal is the subject's last token. Requests carry no Nats-Msg-Id:
	// JetStream deduplicates that id across every principal's requests, so
	// another principal could send an id first and have the request dropped.
	// The intake rejects a request with one (CodeMsgIDForbidden).
	IdempotencyKeyHeader = "Mightyetl-Idempotency-Key"
	// DefaultMaxPayloadBytes is MIGHTYETL_MAX_PAYLOAD_BYTES's default, 1 MiB.
	DefaultMaxPayloadBytes = 1 << 20
)

// InboxPrefix is the inbox prefix of principal's producer connections,
// "_INBOX.<principal>". Connect with nats.CustomInboxPrefix(InboxPrefix(p))
// (InboxOption) so the JetStream acks and the intake's answers arrive on
// subjects the producer may subscribe to under NATS permissions.
func InboxPrefix(principal string) string { return "_INBOX." + principal }

// InboxOption is nats.CustomInboxPrefix(InboxPrefix(principal)).
func InboxOption(principal string) nats.Option { return nats.CustomInboxPrefix(InboxPrefix(principal)) }

// ProducerOptions configure NewProducer. Zero values take the defaults noted.
type ProducerOptions struct {
	// Prefix is the service's subject prefix; empty means
	// DefaultSubjectPrefix.
	Prefix string
	// MaxPayloadBytes refuses larger requests before publishing
	// (CodePayloadTooLarge); zero means DefaultMaxPayloadBytes. The
	// server's max_payload applies too.
	MaxPayloadBytes int
}

// Producer publishes job requests for one principal through JetStream. It
// is safe for concurrent use; it does not own the connection.
type Producer struct {
	nc        *nats.Conn
	js        jetstream.JetStream
	principal string
	subject   string
	rejects   string
	o         ProducerOptions
}

// NewProducer returns a Producer for principal (the last token of its
// request subject; NATS permissions decide who may publish there) over nc,
// which should be connected with InboxOption(principal).
func NewProducer(nc *nats.Conn, principal string, o ProducerOptions) (*Producer, error) {
	if principal == "" || strings.ContainsAny(principal, ".*> \t\r\n") {
		return nil, errors.New("mightyetl: principal must be one non-empty subject token")
	}
	if o.Prefix == "" {
		o.Prefix = DefaultSubjectPrefix
	}
	if o.MaxPayloadBytes <= 0 {
		o.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("mightyetl: jetstream: %w", err)
	}
	return &Producer{nc: nc, js: js, principal: principal, o: o,
		subject: o.Prefix + ".requests." + principal, rejects: o.Prefix + ".rejections"}, nil
}

// Subject returns the request subject, "<prefix>.requests.<principal>".
func (p *Producer) Subject() string { return p.subject }

// Published is JetStream's acknowledgement of a request.
type Published struct {
	// Key is the request's idempotency key (the caller's or a generated one).
	Key string
	// Sequence is the request's stream sequence. Every publish stores a
	// message of its own (JetStream deduplicates nothing without a
	// Nats-Msg-Id); copies with the same key and bytes converge on one job.
	Sequence uint64
}

// Publish publishes records (a JSON array of records, byte for byte) as a
// job request with idempotency key key (generated when empty) and returns
// when JetStream has stored it. The intake turns it into a job later; the
// same key and bytes converge on one job. Use PublishAndWait for the answer.
// A request larger than the payload limit is CodePayloadTooLarge, and a key
// the intake would refuse is CodeInvalidIdempotencyKey (see keyProblem);
// neither is published. opts set the job's priority and earliest start
// (WithPriority, WithNotBefore: PriorityHeader and NotBeforeHeader on the
// message); a priority outside 1..4 is CodeInvalidPriority, not published.
func (p *Producer) Publish(ctx context.Context, records []byte, key string, opts ...SubmitOption) (*Published, error) {
	return p.publish(ctx, records, key, "", opts)
}

func (p *Producer) publish(ctx context.Context, records []byte, key, replyTo string, opts []SubmitOption) (*Published, error) {
	if key == "" {
		key = NewKey()
	}
	if e := keyProblem(key); e != nil {
		return nil, e
	}
	sch, e := scheduleOf(opts)
	if e != nil {
		return nil, e
	}
	limit := p.o.MaxPayloadBytes
	if mp := int(p.nc.MaxPayload()); mp > 0 && mp-1024 < limit {
		limit = mp - 1024 // headers travel in the same message
	}
	if len(records) > limit {
		return nil, &Error{Code: CodePayloadTooLarge, Detail: fmt.Sprintf("the request is %d bytes; the limit is %d", len(records), limit)}
	}
	msg := nats.NewMsg(p.subject)
	msg.Data = records
	msg.Header.Set(IdempotencyKeyHeader, key)
	if replyTo != "" {
		msg.Header.Set(ReplyToHeader, replyTo)
	}
	priority, notBefore := sch.values()
	if priority != "" {
		msg.Header.Set(PriorityHeader, priority)
	}
	if notBefore != "" {
		msg.Header.Set(NotBeforeHeader, notBefore)
	}
	ack, err := p.js.PublishMsg(ctx, msg)
	if err != nil {
		return nil, fmt.Errorf("mightyetl: publish request: %w", err)
	}
	return &Published{Key: key, Sequence: ack.Sequence}, nil
}

// PublishAndWait publishes like Publish, naming a fresh inbox under
// InboxPrefix(principal) for the intake's answer, and waits for it until
// ctx ends. It returns the job (a Submission; Replayed when the key and
// bytes had made it before) or the problem as an *Error (Status zero):
// CodeInvalidJSON, CodeInvalidRecord, CodeSubmissionKeyReused, ... and
// CodeRequestDeliveriesExhausted after the intake failed internally too
// often (publish it again later with the same key). No other principal can
// keep the request out of the stream: it carries no Nats-Msg-Id for anyone
// to forge. opts as for Publish; a malformed or too distant notBefore is
// CodeInvalidNotBefore.
func (p *Producer) PublishAndWait(ctx context.Context, records []byte, key string, opts ...SubmitOption) (*Submission, error) {
	if key == "" {
		key = NewKey()
	}
	inbox := InboxPrefix(p.principal) + strings.TrimPrefix(nats.NewInbox(), "_INBOX")
	sub, err := p.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("mightyetl: subscribe to the reply inbox: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if _, err := p.publish(ctx, records, key, inbox, opts); err != nil {
		return nil, err
	}
	m, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("mightyetl: wait for the intake's answer: %w", err)
	}
	if code := m.Header.Get(ErrorCodeHeader); code != "" {
		return nil, problemOfNATS(code, m.Data)
	}
	var s Submission
	if err := json.Unmarshal(m.Data, &s); err != nil || s.JobID == "" {
		return nil, &Error{Code: CodeUnexpectedResponse, Detail: "undecodable answer from the intake"}
	}
	s.Key = key
	return &s, nil
}

// Idempotency-key rules of the intake (internal/intake.ValidKey).
const (
	minKeyLength = 16
	maxKeyLength = 128
)

// keyProblem is why the intake would refuse key, or nil when it would not:
// a key, bare or as an RFC 9651 sf-string in double quotes, is 16 to 128
// characters of A-Z a-z 0-9 . _ : - (a CR or LF would also break the
// message's header block). The *Error (CodeInvalidIdempotencyKey) names
// the rule that failed, never the key: a caller's key may be a secret.
func keyProblem(key string) *Error {
	if len(key) >= 2 && key[0] == '"' && key[len(key)-1] == '"' {
		key = key[1 : len(key)-1]
	}
	if len(key) < minKeyLength || len(key) > maxKeyLength {
		return &Error{Code: CodeInvalidIdempotencyKey,
			Detail: fmt.Sprintf("the key is %d bytes long; a key has %d to %d characters", len(key), minKeyLength, maxKeyLength)}
	}
	for i := 0; i < len(key); i++ {
		switch c := key[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == ':', c == '-':
		default:
			return &Error{Code: CodeInvalidIdempotencyKey,
				Detail: fmt.Sprintf("byte %d of the key is not one of A-Z a-z 0-9 . _ : -", i+1)}
		}
	}
	return nil
}

func problemOfNATS(code string, body []byte) *Error {
	e := &Error{Code: ErrorCode(code)}
	var p struct{ Title, Detail string }
	if json.Unmarshal(body, &p) == nil {
		e.Title, e.Detail = p.Title, p.Detail
	}
	return e
}

// Rejections calls handle with an *Error (Status zero, Code set) for every
// request the intake terminates as invalid, as announced on
// "<prefix>.rejections". The subject is advisory (core NATS, no replay) and
// payload-free: it carries the code only, of every principal's requests; use
// PublishAndWait to learn the outcome of one's own request. handle runs on
// one goroutine at a time. Stop with the returned subscription's
// Unsubscribe.
func (p *Producer) Rejections(handle func(*Error)) (*nats.Subscription, error) {
	sub, err := p.nc.Subscribe(p.rejects, func(m *nats.Msg) {
		var r struct {
			ErrorCode string `json:"errorCode"`
		}
		if json.Unmarshal(m.Data, &r) == nil && r.ErrorCode != "" {
			handle(&Error{Code: ErrorCode(r.ErrorCode)})
		}
	})
	if err != nil {
		return nil, fmt.Errorf("mightyetl: subscribe to rejections: %w", err)
	}
	return sub, nil
}
