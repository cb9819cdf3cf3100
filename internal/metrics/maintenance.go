package metrics

import "github.com/prometheus/client_golang/prometheus"

// Kinds of retention, the kind label of MaintenancePruned: the values of
// pg.PruneKind.
const (
	PruneTerminalJobs = "terminal_jobs"
	PruneLedger       = "ledger"
	PruneOrphanQueue  = "orphan_queue"
	PruneOutbox       = "outbox"
	PruneAudit        = "audit"
	// The chunked-job kinds (issue 32).
	PruneChunkedQueue      = "chunked_queue"
	PruneDiscardedLoadRows = "discarded_load_rows"
	PruneBadRecords        = "bad_records"
	PruneChunkedLoads      = "chunked_loads"
	PruneExpiredUploads    = "expired_uploads"
	PruneTerminalUploads   = "terminal_uploads"
	PruneUploadParts       = "upload_parts"
	PruneUploadChunks      = "upload_chunks"
)

// PruneKinds lists every kind label value of MaintenancePruned.
var PruneKinds = []string{PruneTerminalJobs, PruneLedger, PruneOrphanQueue, PruneOutbox, PruneAudit,
	PruneChunkedQueue, PruneDiscardedLoadRows, PruneBadRecords, PruneChunkedLoads,
	PruneExpiredUploads, PruneTerminalUploads, PruneUploadParts, PruneUploadChunks}

// Outcomes of one retention run, the outcome label of MaintenanceRuns.
const (
	// RunOK: every part of retention ran to its end.
	RunOK = "ok"
	// RunError: a part failed (its error class is logged); the others ran.
	RunError = "error"
	// RunFenced: a batch found the leadership term over (expired or taken)
	// and deleted nothing; the run stopped there.
	RunFenced = "fenced"
)

// Outcomes of one election attempt, the outcome label of
// MaintenanceElections.
const (
	ElectionGained  = "gained"  // this process took the leadership
	ElectionRenewed = "renewed" // this process kept it
	ElectionDenied  = "denied"  // another process holds it
	ElectionLost    = "lost"    // this process held it and found it taken
	ElectionError   = "error"   // the statement failed (database unavailable, no table yet, ...)
)

// ElectionOutcomes lists every outcome label value of MaintenanceElections.
var ElectionOutcomes = []string{ElectionGained, ElectionRenewed, ElectionDenied, ElectionLost, ElectionError}

// Maintenance is the built-in retention's collectors (internal/maintenance).
// The zero value is not usable; use NewMaintenance. Safe for concurrent use.
type Maintenance struct {
	// Pruned is mightyetl_maintenance_rows_pruned_total{kind}: rows this
	// process deleted as the elected maintainer.
	Pruned *prometheus.CounterVec
	// Runs is mightyetl_maintenance_runs_total{outcome}: retention runs of
	// this process as the elected maintainer.
	Runs *prometheus.CounterVec
	// LastSuccess is mightyetl_maintenance_last_success_timestamp_seconds:
	// Unix time of this process's last retention run that ended ok; 0 when
	// none has.
	LastSuccess prometheus.Gauge
	// Leader is mightyetl_maintenance_leader: 1 while this process holds the
	// maintenance leadership, else 0. Summed over the fleet it is at most 1
	// (at most 2 for the moment of a handover: the old holder's next
	// attempt finds it lost).
	Leader prometheus.Gauge
	// Elections is mightyetl_maintenance_elections_total{outcome}: election
	// attempts (take or renew) of this process.
	Elections *prometheus.CounterVec
}

// NewMaintenance creates the maintenance collectors and registers them on
// reg (nil registers nothing), reusing collectors already registered there.
func NewMaintenance(reg prometheus.Registerer) *Maintenance {
	m := &Maintenance{
		Pruned: registerOrReuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mightyetl_maintenance_rows_pruned_total",
			Help: "Rows deleted by the built-in retention of this process while it was the elected maintainer, by kind (terminal_jobs, ledger, orphan_queue, outbox, audit, and the large-job kinds chunked_queue, discarded_load_rows, bad_records, chunked_loads, expired_uploads, terminal_uploads, upload_parts, upload_chunks).",
		}, []string{"kind"})),
		Runs: registerOrReuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mightyetl_maintenance_runs_total",
			Help: "Retention runs of this process as the elected maintainer, by outcome (ok, error, fenced).",
		}, []string{"outcome"})),
		LastSuccess: registerOrReuse(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mightyetl_maintenance_last_success_timestamp_seconds",
			Help: "Unix time of this process's last retention run that ended ok; 0 when none has.",
		})),
		Leader: registerOrReuse(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mightyetl_maintenance_leader",
			Help: "1 while this process holds the maintenance leadership, else 0.",
		})),
		Elections: registerOrReuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mightyetl_maintenance_elections_total",
			Help: "Maintenance election attempts of this process, by outcome (gained, renewed, denied, lost, error).",
		}, []string{"outcome"})),
	}
	for _, k := range PruneKinds {
		m.Pruned.WithLabelValues(k)
	}
	for _, o := range []string{RunOK, RunError, RunFenced} {
		m.Runs.WithLabelValues(o)
	}
	for _, o := range ElectionOutcomes {
		m.Elections.WithLabelValues(o)
	}
	return m
}
