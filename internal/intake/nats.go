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

// HandleRequest submits one request. A rejection returns its stable code
// (the consumer terminates the message and publishes a payload-free
// rejection); an unavailable database returns an error (the consumer
// redelivers later); success returns the job representation.
func (n NATSRequests) HandleRequest(ctx context.Context, principal, idempotencyKey string, body []byte) ([]byte, string, error) {
	key, ok := natsKey(idempotencyKey)
	if !ok {
		return nil, codes.InvalidIdempotencyKey, nil
	}
	kind := n.Kind
	if kind == "" {
		kind = pg.KindETLRecords
	}
	res, err := n.Service.Submit(ctx, SubmitRequest{Principal: principal, IdempotencyKey: key, Body: body, Kind: kind})
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
		if errors.As(err, &e) && e.Code != codes.TargetUnavailable && e.Code != codes.InternalError {
			return nil, e.Code, nil
		}
		return nil, "", err
	}
	reply, err := json.Marshal(RequestReply{
		JobRecordID: res.Job.JobID.String(), JobStatus: res.Job.Status,
		StatusURL: "/api/etl/jobs/" + res.Job.JobID.String(), Replayed: res.Replayed,
	})
	if err != nil {
		return nil, "", err
	}
	return reply, "", nil
}
