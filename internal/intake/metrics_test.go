package intake

import (
	"context"
	"testing"

	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Rejected submissions are counted by their stable problem code (the
// dashboard's "rejections by code" panel), accepted ones are not; every
// code of metrics.SubmissionRejectionCodes has a series from the start,
// and a rejection adds none outside that set.
func TestRejectionsAreCountedByCode(t *testing.T) {
	t.Parallel()
	m := metrics.NewIntake(prometheus.NewRegistry())
	s, _ := newService(t, func(o *Options) { o.Metrics = m })
	ctx := context.Background()
	if _, err := s.Submit(ctx, SubmitRequest{Principal: "alice", IdempotencyKey: "key-rejected-00000001", Body: []byte(`{`)}); err == nil {
		t.Fatal("invalid JSON accepted")
	}
	if _, err := s.Submit(ctx, SubmitRequest{Principal: "alice", IdempotencyKey: "short", Body: []byte(body)}); err == nil {
		t.Fatal("short key accepted")
	}
	if _, err := s.Submit(ctx, SubmitRequest{Principal: "alice", IdempotencyKey: "key-accepted-00000001", Body: []byte(body)}); err != nil {
		t.Fatal(err)
	}
	counted := map[string]float64{codes.InvalidJSON: 1, codes.InvalidIdempotencyKey: 1}
	for _, code := range metrics.SubmissionRejectionCodes {
		if got := testutil.ToFloat64(m.Rejections.WithLabelValues(code)); got != counted[code] {
			t.Errorf("rejections{code=%s} = %v, want %v", code, got, counted[code])
		}
	}
	if n := testutil.CollectAndCount(m.Rejections); n != len(metrics.SubmissionRejectionCodes) {
		t.Errorf("%d rejection code series, want the %d of metrics.SubmissionRejectionCodes", n, len(metrics.SubmissionRejectionCodes))
	}
}
