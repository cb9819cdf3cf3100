package intake

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// TestGroupCommitBoundedByBytes: a group commit carries every payload of
// its round in one text[] parameter, so rounds are bounded by payload bytes
// (16 MiB by default), not only by count. Three 7 MB submissions that fit
// one round by count (max 3) leave in two transactions (2 + 1), and all
// three jobs commit.
func TestGroupCommitBoundedByBytes(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := metrics.NewIntake(reg)
	s, db := newService(t, func(o *Options) {
		o.GroupCommitWindow = time.Hour // only a full round flushes
		o.GroupCommitMaxBatch = 3
		o.Metrics = m
	})
	big := `[{"id":"a1","pad":"` + strings.Repeat("x", 7_000_000) + `"}]`
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range 3 {
		wg.Go(func() {
			_, errs[i] = s.Submit(context.Background(), SubmitRequest{Principal: "alice",
				IdempotencyKey: fmt.Sprintf("key-big-payload-%04d", i), Body: []byte(big)})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("submission %d: %v", i, err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == "mightyetl_intake_submit_batch_size" {
			h := mf.GetMetric()[0].GetHistogram()
			n, sum = h.GetSampleCount(), h.GetSampleSum()
		}
	}
	if n != 2 || sum != 3 {
		t.Fatalf("%d group commits carrying %v submissions, want 2 carrying 3 (2 + 1: 21 MB exceed 16 MiB)", n, sum)
	}
	var jobs int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM etl_job_records`).Scan(&jobs); err != nil || jobs != 3 {
		t.Fatalf("jobs %d %v", jobs, err)
	}
}
