package intake

import (
	"context"
	"errors"
	"testing"
)

// TestEmptyHashKeyTakesNoJobs: a Service built without a principal hash key
// (deny mode) refuses every principal-scoped use case as an internal error,
// on the NATS path too, and writes nothing: it never hashes a principal
// under an empty key.
func TestEmptyHashKeyTakesNoJobs(t *testing.T) {
	t.Parallel()
	s, db := newService(t, func(o *Options) { o.PrincipalHashKey = nil })
	ctx := context.Background()
	_, code, err := NATSRequests{Service: s}.HandleRequest(ctx, NATSRequest{Principal: "alice", IdempotencyKey: "nats-key-0000000001", Body: []byte(body)})
	if err == nil || code != "" {
		t.Fatalf("NATS request: code %q err %v, want an internal error", code, err)
	}
	if _, err := s.Submit(ctx, SubmitRequest{Principal: "alice", IdempotencyKey: "http-key-0000000001", Body: []byte(body)}); !errors.Is(err, ErrInternal) {
		t.Fatalf("submit: %v, want ErrInternal", err)
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM etl_job_records`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d jobs written under an empty key", n)
	}
}
