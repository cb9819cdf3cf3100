package metrics

import (
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/prometheus/client_golang/prometheus"
)

// Submission outcome label values (mightyetl_jobs_submitted_total{outcome}).
const (
	SubmissionAccepted = "accepted" // a new job was created
	SubmissionReplayed = "replayed" // an identical earlier submission's job was returned
	SubmissionRejected = "rejected" // validation, key reuse or an unavailable database
)

// Cancellation outcome label values (mightyetl_job_cancellations_total{outcome}).
const (
	CancellationCancelled = "cancelled" // this request moved the job to CANCELLED
	CancellationReplayed  = "replayed"  // the same key cancelled it earlier
	CancellationConflict  = "conflict"  // terminal already, or another key cancelled it
	CancellationNotFound  = "not_found" // absent, foreign or malformed id
)

// Upload operations and outcomes (mightyetl_upload_requests_total{operation,outcome}).
const (
	UploadOpCreate = "create" // POST /api/etl/uploads
	UploadOpPart   = "part"   // PUT .../parts/{n}
	UploadOpSubmit = "submit" // POST .../jobs
	UploadOpAbort  = "abort"  // DELETE the upload
	UploadAccepted = "accepted"
	UploadReplayed = "replayed" // a submit answered with the job an earlier one made
	UploadRejected = "rejected"
)

// SubmissionRejectionCodes are the label values of
// mightyetl_submission_rejections_total{code}: every problem code a
// submission (intake.Submit, over HTTP or NATS) is rejected with: the
// record validation's (etl), the key's, the principal's, key reuse, the
// schedule headers', the owner's quota, and a database that is unavailable or failed. NewIntake starts a zero series
// for each, so a dashboard panel or an absent() alert sees the counter on
// a fleet that has rejected nothing yet. Do not modify it.
var SubmissionRejectionCodes = []string{
	codes.InvalidJSON, codes.InvalidRecord, codes.BatchTooLarge, codes.InvalidIdempotencyKey,
	codes.PrincipalRequired, codes.SubmissionKeyReused, codes.TargetUnavailable, codes.InternalError,
	codes.InvalidPriority, codes.InvalidNotBefore, codes.OwnerQuotaExceeded,
}

// Status classes of mightyetl_http_request_duration_seconds{status_class}.
var statusClasses = []string{"1xx", "2xx", "3xx", "4xx", "5xx"}

// StatusClass maps an HTTP status code to its finite label value.
func StatusClass(code int) string {
	if code < 100 || code > 599 {
		return "5xx"
	}
	return statusClasses[code/100-1]
}

// Intake holds the intake process's collectors. Route labels are the
// route templates of the HTTP mux (e.g. "GET /api/etl/jobs/{id}"), never a
// concrete path.
type Intake struct {
	Submissions     *prometheus.CounterVec
	Cancellations   *prometheus.CounterVec
	RequestDuration *prometheus.HistogramVec
	SubmitBatchSize prometheus.Histogram
	// HandlerPanics counts HTTP handler panics recovered into a 500, by
	// route template.
	HandlerPanics *prometheus.CounterVec
	// Rejections counts rejected submissions (HTTP and NATS) by their
	// stable problem code, a finite set (contract.md); every code of
	// SubmissionRejectionCodes has a series from the start.
	Rejections *prometheus.CounterVec
	// Uploads counts large-job upload requests by operation and outcome.
	Uploads *prometheus.CounterVec
	// OwnerQuotaDecisions counts the per-owner quota decisions by outcome
	// (OwnerQuotaOutcomes).
	OwnerQuotaDecisions *prometheus.CounterVec
}

// NewIntake creates the intake collectors and registers them on reg.
func NewIntake(reg prometheus.Registerer) *Intake {
	m := &Intake{
		Submissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mightyetl_jobs_submitted_total",
			Help: "Job submissions by outcome: accepted, replayed, rejected.",
		}, []string{"outcome"}),
		Cancellations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mightyetl_job_cancellations_total",
			Help: "Cancellation requests by outcome: cancelled, replayed, conflict, not_found.",
		}, []string{"outcome"}),
		RequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mightyetl_http_request_duration_seconds",
			Help:    "HTTP request duration by route template and status class.",
			Buckets: latencyBuckets,
		}, []string{"route", "status_class"}),
		SubmitBatchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mightyetl_intake_submit_batch_size",
			Help:    "Submissions committed per group-commit transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}),
		HandlerPanics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mightyetl_http_handler_panics_total",
			Help: "HTTP handler panics recovered into 500 etl_internal_error, by route template.",
		}, []string{"route"}),
		Rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mightyetl_submission_rejections_total",
			Help: "Rejected job submissions (HTTP and NATS) by problem code.",
		}, []string{"code"}),
		Uploads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mightyetl_upload_requests_total",
			Help: "Large-job upload requests by operation (create, part, submit, abort) and outcome (accepted, replayed, rejected).",
		}, []string{"operation", "outcome"}),
	}
	for _, o := range []string{SubmissionAccepted, SubmissionReplayed, SubmissionRejected} {
		m.Submissions.WithLabelValues(o)
	}
	for _, o := range []string{CancellationCancelled, CancellationReplayed, CancellationConflict, CancellationNotFound} {
		m.Cancellations.WithLabelValues(o)
	}
	for _, c := range SubmissionRejectionCodes {
		m.Rejections.WithLabelValues(c)
	}
	for _, op := range []string{UploadOpCreate, UploadOpPart, UploadOpSubmit, UploadOpAbort} {
		for _, o := range []string{UploadAccepted, UploadReplayed, UploadRejected} {
			if o != UploadReplayed || op == UploadOpSubmit {
				m.Uploads.WithLabelValues(op, o)
			}
		}
	}
	m.OwnerQuotaDecisions = newOwnerQuotaDecisions()
	reg.MustRegister(m.Submissions, m.Cancellations, m.RequestDuration, m.SubmitBatchSize, m.HandlerPanics, m.Rejections, m.Uploads,
		m.OwnerQuotaDecisions)
	return m
}
