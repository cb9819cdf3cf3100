package metrics

import "github.com/prometheus/client_golang/prometheus"

// Owner quota decisions (mightyetl_owner_quota_decisions_total{outcome}):
// one per submission of an owner that some quota limits (issue 33). Owners
// without a limit are not counted. Never a principal in a label.
const (
	OwnerQuotaAdmitted       = "admitted"        // within every limit of the owner
	OwnerQuotaRateLimited    = "rate_limited"    // refused: the owner's token bucket is empty
	OwnerQuotaPendingLimited = "pending_limited" // refused: the owner's pending jobs are at the cap
	OwnerQuotaResubmitted    = "resubmitted"     // over a limit, but the key already has a job: let through to converge on it
)

// OwnerQuotaOutcomes are the label values of
// mightyetl_owner_quota_decisions_total, each with a series from the start.
var OwnerQuotaOutcomes = []string{OwnerQuotaAdmitted, OwnerQuotaRateLimited, OwnerQuotaPendingLimited, OwnerQuotaResubmitted}

// newOwnerQuotaDecisions is Intake.OwnerQuotaDecisions, not registered.
func newOwnerQuotaDecisions() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mightyetl_owner_quota_decisions_total",
		Help: "Submissions of owners with a quota (MIGHTYETL_OWNER_*) by decision: admitted, rate_limited, pending_limited, resubmitted.",
	}, []string{"outcome"})
	for _, o := range OwnerQuotaOutcomes {
		c.WithLabelValues(o)
	}
	return c
}
