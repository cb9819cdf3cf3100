package metrics_test

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// describing records the name of every metric registered through it.
type describing struct {
	*prometheus.Registry
	names map[string]bool
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (d *describing) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		if m := fqName.FindStringSubmatch(desc.String()); m != nil {
			d.names[m[1]] = true
		}
	}
	return d.Registry.Register(c)
}

func (d *describing) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := d.Register(c); err != nil {
			panic(err)
		}
	}
}

// labelsUnknownAtStart are the labelled metrics whose label values are not
// a fixed set known to this package: route templates belong to the HTTP
// mux, and the config info gauge is set by the worker at start.
var labelsUnknownAtStart = map[string]bool{
	"mightyetl_http_request_duration_seconds": true,
	"mightyetl_http_handler_panics_total":     true,
	"mightyetl_worker_config_info":            true,
}

// Counters by a fixed label set have a series from the start (issue 29,
// defect 14): a fresh registry's gather shows a zero series for every
// rejection code, every outcome, renewal result, loss reason, NATS error
// and request kind and outbox kind, so a dashboard panel or an absent()
// alert sees them on a fleet where none has occurred. Every metric the
// constructors register is gathered at once except those whose label
// values are not known here.
func TestEveryFixedLabelValueStartsAtZero(t *testing.T) {
	t.Parallel()
	reg := &describing{Registry: prometheus.NewRegistry(), names: map[string]bool{}}
	metrics.NewIntake(reg)
	metrics.NewWorker(reg)
	metrics.NewEvents(reg)
	metrics.NewOutbox(reg)
	metrics.NewMaintenance(reg)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// series maps "name{label=value,...}" to the series' counter value or
	// histogram count.
	series := map[string]float64{}
	gathered := map[string]bool{}
	for _, f := range fams {
		gathered[f.GetName()] = true
		for _, m := range f.GetMetric() {
			var v float64
			switch {
			case m.GetCounter() != nil:
				v = m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				v = float64(m.GetHistogram().GetSampleCount())
			case m.GetGauge() != nil:
				v = m.GetGauge().GetValue()
			}
			series[key(f.GetName(), m.GetLabel())] = v
		}
	}

	var missing []string
	for name := range reg.names {
		if !gathered[name] && !labelsUnknownAtStart[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("metrics without a series at start: %v", missing)
	}

	want := func(name, label string, values ...string) {
		t.Helper()
		if len(values) == 0 {
			t.Fatalf("%s: no label values to check", name)
		}
		for _, v := range values {
			k := fmt.Sprintf("%s{%s=%s}", name, label, v)
			got, ok := series[k]
			switch {
			case !ok:
				t.Errorf("no series %s at start", k)
			case got != 0:
				t.Errorf("%s starts at %v, want 0", k, got)
			}
		}
	}
	want("mightyetl_submission_rejections_total", "code", metrics.SubmissionRejectionCodes...)
	want("mightyetl_jobs_submitted_total", "outcome", metrics.SubmissionAccepted, metrics.SubmissionReplayed, metrics.SubmissionRejected)
	want("mightyetl_job_cancellations_total", "outcome", metrics.CancellationCancelled, metrics.CancellationReplayed,
		metrics.CancellationConflict, metrics.CancellationNotFound)
	outcomes := []string{metrics.OutcomeSucceeded, metrics.OutcomeRetried, metrics.OutcomeFailed, metrics.OutcomeStale,
		metrics.OutcomeCancelled, metrics.OutcomeReleased}
	want("mightyetl_worker_outcomes_total", "outcome", append([]string{metrics.OutcomeClaimed}, outcomes...)...)
	want("mightyetl_job_execution_seconds", "outcome", outcomes...)
	want("mightyetl_lease_renewals_total", "outcome", metrics.RenewalRenewed, metrics.RenewalStale, metrics.RenewalDBError)
	want("mightyetl_lease_claims_lost_total", "reason", metrics.LostNotRenewed, metrics.LostMarginGone, metrics.LostRevoked,
		metrics.LostFencedWrite, metrics.LostSuperseded)
	want("mightyetl_nats_async_errors_total", "kind", metrics.NATSErrSlowConsumer, metrics.NATSErrPermission, metrics.NATSErrOther)
	want("mightyetl_nats_wakeups_received_total", "kind", metrics.WakeupAvailable, metrics.WakeupRevoked)
	want("mightyetl_nats_malformed_messages_total", "kind", metrics.WakeupAvailable, metrics.WakeupRevoked)
	want("mightyetl_nats_requests_total", "outcome", metrics.RequestAccepted, metrics.RequestRejected, metrics.RequestRetried, metrics.RequestAckFailed)
	want("mightyetl_outbox_relay_wakeups_total", "source", metrics.WakeNotify, metrics.WakePoll, metrics.WakeReconnect)
	want("mightyetl_maintenance_rows_pruned_total", "kind", metrics.PruneKinds...)
	want("mightyetl_maintenance_runs_total", "outcome", metrics.RunOK, metrics.RunError, metrics.RunFenced)
	want("mightyetl_maintenance_elections_total", "outcome", metrics.ElectionOutcomes...)
	for _, kind := range []string{metrics.OutboxKindAvailable, metrics.OutboxKindRevoked, metrics.OutboxKindLifecycle} {
		for _, o := range []string{metrics.OutboxPublished, metrics.OutboxFailed, metrics.OutboxDropped} {
			k := fmt.Sprintf("mightyetl_outbox_publish_total{kind=%s,outcome=%s}", kind, o)
			if got, ok := series[k]; !ok || got != 0 {
				t.Errorf("%s at start: present %v value %v, want a zero series", k, ok, got)
			}
		}
	}
}

// The rejection codes are problem codes of the API, each once, and
// include every code of the submission's own validation and key checks.
func TestSubmissionRejectionCodesAreProblemCodes(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, c := range metrics.SubmissionRejectionCodes {
		if !slices.Contains(codes.Problems, c) {
			t.Errorf("%s is not a problem code (codes.Problems)", c)
		}
		if seen[c] {
			t.Errorf("%s listed twice", c)
		}
		seen[c] = true
	}
	for _, c := range []string{codes.InvalidJSON, codes.InvalidRecord, codes.BatchTooLarge, codes.InvalidIdempotencyKey,
		codes.PrincipalRequired, codes.SubmissionKeyReused, codes.TargetUnavailable, codes.InternalError} {
		if !seen[c] {
			t.Errorf("a submission rejected with %s has no series at start", c)
		}
	}
}

func key(name string, labels []*dto.LabelPair) string {
	parts := make([]string, len(labels))
	for i, l := range labels {
		parts[i] = l.GetName() + "=" + l.GetValue()
	}
	sort.Strings(parts)
	return name + "{" + strings.Join(parts, ",") + "}"
}
