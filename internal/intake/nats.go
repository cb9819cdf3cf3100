package intake

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// RequestReply is the reply to a NATS job request: the same representation
// as the HTTP submit response, plus whether the request was a replay.
type RequestReply struct {
	JobRecordID string `json:"jobRecordId"`
	JobStatus   string `json:"jobStatus"`
	StatusURL   string `json:"statusUrl"`
	Priority    int    `json:"priority,omitempty"`
	NotBefore   string `json:"notBefore,omitempty"`
	Replayed    bool   `json:"idempotencyReplayed"`
}

// NATSRequests adapts a Service to the NATS request consumer
// (events.RequestHandler): the subject's last token is the principal, the
// idempotency key the Mightyetl-Idempotency-Key header (the consumer
// rejects requests that carry a Nats-Msg-Id), the body the record array.
// The job is committed before HandleRequest returns, so the consumer acks
// only after the commit.
type NATSRequests struct {
	Service *Service
	// Kind is the job kind requests create; empty means pg.KindETLRecords.
	Kind string
}

// NATSRequest is one NATS job request, the fields of events.Request (the
// bridge converts one into the other).
type NATSRequest struct {
	// Principal is the subject's last token.
	Principal string
	// IdempotencyKey is the Mightyetl-Idempotency-Key header, possibly empty.
	IdempotencyKey string
	// Priority and NotBefore are the values of PriorityHeader and
	// NotBeforeHeader, nil when absent.
	Priority, NotBefore []string
	// Body is the record array.
	Body []byte
}

// HandleRequest submits one request. A rejection returns its stable code
// (the consumer terminates the message and publishes a payload-free
// rejection): the key's, then the schedule headers' (ParseSchedule, the
// HTTP headers' rules), then Submit's; an unavailable database returns an
// error (the consumer redelivers later); success returns the job
// representation.
func (n NATSRequests) HandleRequest(ctx context.Context, req NATSRequest) ([]byte, string, error) {
	key, ok := natsKey(req.IdempotencyKey)
	if !ok {
		return nil, codes.InvalidIdempotencyKey, nil
	}
	schedule, err := ParseSchedule(req.Priority, req.NotBefore)
	if err != nil {
		n.Service.RejectSubmission(err)
		return nil, CodeOf(err), nil
	}
	kind := n.Kind
	if kind == "" {
		kind = pg.KindETLRecords
	}
	res, err := n.Service.Submit(ctx, SubmitRequest{Principal: req.Principal, IdempotencyKey: key, Body: req.Body, Kind: kind,
		Schedule: schedule})
	return natsAnswer(res, err)
}

// natsKey normalises a request's idempotency key header with the HTTP
// header's format rules: raw, or an RFC 9651 sf-string (the key alphabet
// has no characters that need escaping); false when it is not a valid key.
func natsKey(raw string) (string, bool) {
	key := raw
	if len(key) >= 2 && key[0] == '"' && key[len(key)-1] == '"' {
		key = key[1 : len(key)-1]
	}
	return key, ValidKey(key)
}

// natsAnswer turns a submission's outcome into HandleRequest's results: a
// rejection's code, an error for a failure to retry, or the reply.
func natsAnswer(res SubmitResult, err error) ([]byte, string, error) {
	if err != nil {
		var e *Error
		// A failure to retry (redelivered) is no rejection: the database
		// unavailable, a schema that moved under this binary, or a fault.
		if errors.As(err, &e) && e.Code != codes.TargetUnavailable && e.Code != codes.InternalError &&
			e.Code != codes.SchemaIncompatible {
			return nil, e.Code, nil
		}
		return nil, "", err
	}
	r := RequestReply{
		JobRecordID: res.Job.JobID.String(), JobStatus: res.Job.Status,
		StatusURL: "/api/etl/jobs/" + res.Job.JobID.String(), Replayed: res.Replayed,
	}
	r.Priority, r.NotBefore = ScheduleView(res.Job)
	reply, err := json.Marshal(r)
	if err != nil {
		return nil, "", err
	}
	return reply, "", nil
}
