package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Worker outcome label values (mightyetl_worker_outcomes_total{outcome}).
const (
	OutcomeClaimed   = "claimed"
	OutcomeSucceeded = "succeeded"
	OutcomeRetried   = "retried"
	OutcomeFailed    = "failed"
	OutcomeStale     = "stale"
	OutcomeCancelled = "cancelled"
	OutcomeReleased  = "released"
)

// Renewal outcome label values (mightyetl_lease_renewals_total{outcome}).
const (
	RenewalRenewed = "renewed"
	RenewalStale   = "stale"
	RenewalDBError = "db_error"
)

// Lost-claim reasons (mightyetl_lease_claims_lost_total{reason}).
const (
	LostNotRenewed  = "not_renewed"  // a renewal matched zero rows
	LostMarginGone  = "margin_gone"  // renewal kept failing until the safety margin ran out (fail closed)
	LostRevoked     = "revoked"      // a NATS revocation arrived and the renewal it triggered found the lease gone
	LostFencedWrite = "fenced_write" // a finish, retry or fail matched zero rows
	LostSuperseded  = "superseded"   // this worker reclaimed the job after the older claim's lease expired
)

// Chunk commit outcomes of chunked jobs
// (mightyetl_worker_chunk_commits_total{outcome}).
const (
	ChunkCommitted = "committed" // the chunk's rows and checkpoint committed
	ChunkStale     = "stale"     // a fenced statement matched nothing: the lease was lost, nothing committed
	ChunkFailed    = "failed"    // the transaction failed (a database error): nothing committed
)

// Worker holds the worker process's collectors.
type Worker struct {
	Outcomes         *prometheus.CounterVec
	ExecutionSeconds *prometheus.HistogramVec
	PickupLatency    prometheus.Histogram
	ClaimBatchSize   prometheus.Histogram
	FinishBatchSize  prometheus.Histogram
	Renewals         *prometheus.CounterVec
	RenewalLag       prometheus.Histogram
	RenewalMargin    prometheus.Histogram
	ClaimsLost       *prometheus.CounterVec
	RunningJobs      prometheus.Gauge
	CancelToStop     prometheus.Histogram
	ConfigRejections prometheus.Counter
	ConfigInfo       *prometheus.GaugeVec
	WakeupsReceived  prometheus.Counter
	// WakeupClaims counts the arrivals claims of the wake-up slots, and
	// WakeupJobs the jobs they took (MIGHTYETL_WORKER_WAKEUP_SLOTS).
	WakeupClaims     prometheus.Counter
	WakeupJobs       prometheus.Counter
	RevocationsHeard prometheus.Counter
	JobTimeouts      prometheus.Counter
	// Chunked (large) jobs.
	RecordsLoaded      prometheus.Counter
	ChunkCommits       *prometheus.CounterVec
	RunningChunkedJobs prometheus.Gauge
}

var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// NewWorker creates the worker collectors and registers them on reg.
func NewWorker(reg prometheus.Registerer) *Worker {
	m := &Worker{
		Outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mightyetl_worker_outcomes_total",
			Help: "Job outcomes seen by this worker: claimed, succeeded, retried, failed, stale, cancelled, released.",
		}, []string{"outcome"}),
		ExecutionSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mightyetl_job_execution_seconds",
			Help:    "Time from claim to the job's final outcome at this worker, by outcome.",
			Buckets: latencyBuckets,
		}, []string{"outcome"}),
		PickupLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mightyetl_job_pickup_latency_seconds",
			Help:    "Time a job was claimable before it was claimed, by the database clock.",
			Buckets: latencyBuckets,
		}),
		ClaimBatchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mightyetl_worker_claim_batch_size",
			Help:    "Jobs taken per claim statement (non-empty claims only).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}),
		FinishBatchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mightyetl_worker_finish_batch_size",
			Help:    "Successful jobs committed per finish transaction (group commit).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}),
		Renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mightyetl_lease_renewals_total",
			Help: "Per-claim lease renewal results: renewed, stale (zero rows: authority lost), db_error.",
		}, []string{"outcome"}),
		RenewalLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mightyetl_lease_renewal_lag_seconds",
			Help:    "How late a renewal round started against its schedule.",
			Buckets: latencyBuckets,
		}),
		RenewalMargin: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mightyetl_lease_renewal_margin_seconds",
			Help:    "Smallest remaining lease time (worker's conservative view) at the start of a renewal round.",
			Buckets: []float64{0, .5, 1, 2, 5, 10, 15, 20, 30, 60, 120, 300},
		}),
		ClaimsLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mightyetl_lease_claims_lost_total",
			Help: "Claims this worker lost, by how it learned: not_renewed, margin_gone, revoked, fenced_write, superseded.",
		}, []string{"reason"}),
		RunningJobs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mightyetl_worker_running_jobs",
			Help: "Claims currently held by this worker.",
		}),
		CancelToStop: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mightyetl_cancellation_to_handler_stop_seconds",
			Help:    "Time from the cancellation commit (database clock) to the cancelled handler's return.",
			Buckets: latencyBuckets,
		}),
		ConfigRejections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mightyetl_config_rejections_total",
			Help: "Start-up configurations rejected by validation.",
		}),
		ConfigInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mightyetl_worker_config_info",
			Help: "Effective worker configuration (value 1), for change evidence. No secrets.",
		}, []string{"build", "schema_version", "lease_duration", "renew_interval", "safety_margin", "concurrency", "poll_interval", "max_attempts"}),
		WakeupsReceived: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mightyetl_worker_wakeups_received_total",
			Help: "Advisory wake-ups received (NATS or in-process).",
		}),
		WakeupClaims: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mightyetl_worker_wakeup_claims_total",
			Help: "Arrivals claims run for the wake-up slots (MIGHTYETL_WORKER_WAKEUP_SLOTS): a wake-up or poll found the producer claiming or without a free slot.",
		}),
		WakeupJobs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mightyetl_worker_wakeup_slot_jobs_total",
			Help: "Jobs the arrivals claims took onto wake-up slots (each its owner's next job, just claimable).",
		}),
		RevocationsHeard: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mightyetl_worker_revocations_received_total",
			Help: "Lease revocations received over NATS (for any job, held here or not).",
		}),
		JobTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mightyetl_worker_job_timeouts_total",
			Help: "Attempts that ran past MIGHTYETL_MAX_JOB_DURATION: the handler was cancelled and the job failed with etl_job_timeout.",
		}),
		RecordsLoaded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mightyetl_worker_records_loaded_total",
			Help: "Records of chunked jobs committed to the target by this worker's chunk transactions (hidden until their job succeeds).",
		}),
		ChunkCommits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mightyetl_worker_chunk_commits_total",
			Help: "Chunk transactions of chunked jobs by outcome: committed, stale (lease lost, nothing committed), failed (database error, nothing committed).",
		}, []string{"outcome"}),
		RunningChunkedJobs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mightyetl_worker_running_chunked_jobs",
			Help: "Chunked-job claims currently running on this worker (their own slots, MIGHTYETL_WORKER_CHUNKED_SLOTS).",
		}),
	}
	for _, o := range []string{ChunkCommitted, ChunkStale, ChunkFailed} {
		m.ChunkCommits.WithLabelValues(o)
	}
	for _, o := range []string{OutcomeClaimed, OutcomeSucceeded, OutcomeRetried, OutcomeFailed, OutcomeStale, OutcomeCancelled, OutcomeReleased} {
		m.Outcomes.WithLabelValues(o)
	}
	// Execution ends in every outcome but claimed.
	for _, o := range []string{OutcomeSucceeded, OutcomeRetried, OutcomeFailed, OutcomeStale, OutcomeCancelled, OutcomeReleased} {
		m.ExecutionSeconds.WithLabelValues(o)
	}
	for _, o := range []string{RenewalRenewed, RenewalStale, RenewalDBError} {
		m.Renewals.WithLabelValues(o)
	}
	for _, r := range []string{LostNotRenewed, LostMarginGone, LostRevoked, LostFencedWrite, LostSuperseded} {
		m.ClaimsLost.WithLabelValues(r)
	}
	reg.MustRegister(m.Outcomes, m.ExecutionSeconds, m.PickupLatency, m.ClaimBatchSize, m.FinishBatchSize,
		m.Renewals, m.RenewalLag, m.RenewalMargin, m.ClaimsLost, m.RunningJobs, m.CancelToStop,
		m.ConfigRejections, m.ConfigInfo, m.WakeupsReceived, m.WakeupClaims, m.WakeupJobs, m.RevocationsHeard, m.JobTimeouts,
		m.RecordsLoaded, m.ChunkCommits, m.RunningChunkedJobs)
	return m
}
