package intake

import (
	"context"

	"github.com/mightyetl/mightyetl/internal/codes"
)

// HandleObject submits one NATS request that references an object instead
// of carrying records (an Object Store reference, internal/natsbridge):
// sub's Principal and IdempotencyKey are set from principal and the key
// header (same rules as HandleRequest). Results as HandleRequest: a
// rejection's code (the consumer terminates the message and publishes the
// payload-free rejection), an error to redeliver after, or the job
// representation once the job's transaction committed.
func (n NATSRequests) HandleObject(ctx context.Context, principal, idempotencyKey string, sub ObjectSubmission) ([]byte, string, error) {
	key, ok := natsKey(idempotencyKey)
	if !ok {
		return nil, codes.InvalidIdempotencyKey, nil
	}
	sub.Principal, sub.IdempotencyKey = principal, key
	return natsAnswer(n.Service.SubmitObject(ctx, sub))
}
