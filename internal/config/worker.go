package config

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/mightyetl/mightyetl/internal/chunked"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/worker"
)

// DefaultDatabaseURL points at the local PostgreSQL.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/mightyetl"

// DefaultWorkerPoolSize is MIGHTYETL_WORKER_POOL_SIZE's default: the
// worker's execution pool, whatever its slots and cores. Its steady demand
// is the claim, the two finish groups and the outbox wake-up at a time;
// docs/operations/connections.md has the budget and the measurement.
const DefaultWorkerPoolSize = 6

// DefaultMetricsAddr is MIGHTYETL_METRICS_ADDR's default: the worker's
// metrics and health listener.
const DefaultMetricsAddr = "127.0.0.1:9091"

// MetricsAddrSetting names the worker's metrics listen address setting as
// listen errors show it: the variable and the flag.
const MetricsAddrSetting = "MIGHTYETL_METRICS_ADDR / --metrics-addr"

var ownerIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{8,128}$`)

// Worker is the worker binary's configuration. Durations are Go syntax.
type Worker struct {
	DatabaseURL     string        // DATABASE_URL
	Database        Database      // MIGHTYETL_DATABASE_POOLER, MIGHTYETL_DATABASE_DIRECT_URL
	WorkerID        string        // MIGHTYETL_WORKER_ID, default worker.DefaultOwnerID() (host-pid-random)
	Concurrency     int           // MIGHTYETL_WORKER_CONCURRENCY, default 8 (1..10000)
	WakeupSlots     int           // MIGHTYETL_WORKER_WAKEUP_SLOTS, default 0 (none; suggested for many owners worker.SuggestedWakeupSlots(concurrency) = max(1, concurrency/64)), 0 with MIGHTYETL_CLAIM_OWNERS=0 (0..concurrency; 0: none)
	ClaimOwners     int           // MIGHTYETL_CLAIM_OWNERS, default 32 (0..1000; 0: first-come first-served)
	PoolSize        int           // MIGHTYETL_WORKER_POOL_SIZE, default 6 (2..1000): execution pool connections
	PollInterval    time.Duration // MIGHTYETL_WORKER_POLL_INTERVAL, default 1s (10ms..1h)
	LeaseDuration   time.Duration // MIGHTYETL_LEASE_DURATION, default 30s (1s..24h)
	RenewInterval   time.Duration // MIGHTYETL_LEASE_RENEW_INTERVAL, default RenewIntervalFor(lease): 10s for 30s
	SafetyMargin    time.Duration // MIGHTYETL_LEASE_SAFETY_MARGIN, default SafetyMarginFor(lease): 5s for 30s
	MaxAttempts     int           // MIGHTYETL_MAX_ATTEMPTS, default 3 (1..100); applied at insert
	RetryBaseDelay  time.Duration // MIGHTYETL_RETRY_BASE_DELAY, default 1s
	RetryMaxDelay   time.Duration // MIGHTYETL_RETRY_MAX_DELAY, default 5m
	ShutdownGrace   time.Duration // MIGHTYETL_SHUTDOWN_GRACE_PERIOD, default 30s
	MetricsAddr     string        // MIGHTYETL_METRICS_ADDR, default 127.0.0.1:9091
	MaxBatchRecords int           // MIGHTYETL_MAX_BATCH_RECORDS, default 1000 (1..100000)
	MaxJobDuration  time.Duration // MIGHTYETL_MAX_JOB_DURATION, default 6h (1s..7d)
	ChunkedSlots    int           // MIGHTYETL_WORKER_CHUNKED_SLOTS, default 2 (0..64; 0: no chunked jobs)
	ChunkRecords    int           // MIGHTYETL_CHUNK_RECORDS, default 10000 (1..1000000)
	ChunkBytes      int           // MIGHTYETL_CHUNK_BYTES, default 8 MiB (64 KiB..256 MiB); also the longest record
	ChunkConns      int           // MIGHTYETL_CHUNK_CONNECTIONS, default 2 (1..16): chunk transactions of one load open at once
	NATS            NATS          // NATS_URL and friends; empty URL: polling only
	Maintenance     Maintenance   // MIGHTYETL_MAINTENANCE_* and MIGHTYETL_PRUNE_*: built-in retention
}

// RegisterWorker registers every worker setting on l into dst.
func RegisterWorker(l *Loader, dst *Worker) {
	l.String(&dst.DatabaseURL, "DATABASE_URL", "database-url", DefaultDatabaseURL, "PostgreSQL URL", nonEmpty)
	RegisterDatabase(l, &dst.Database)
	l.String(&dst.WorkerID, "MIGHTYETL_WORKER_ID", "worker-id", worker.DefaultOwnerID(), "lease owner id [A-Za-z0-9._:-]{8,128}", func(s string) error {
		if !ownerIDPattern.MatchString(s) {
			return errors.New("must match [A-Za-z0-9._:-]{8,128}")
		}
		return nil
	})
	l.Int(&dst.Concurrency, "MIGHTYETL_WORKER_CONCURRENCY", "concurrency", worker.DefaultConcurrency, 1, 10000, "execution slots")
	l.Int(&dst.PoolSize, "MIGHTYETL_WORKER_POOL_SIZE", "pool-size", DefaultWorkerPoolSize, 2, 1000, "execution pool connections (claims, finish groups, failures; renewal has 2 of its own)")
	l.Duration(&dst.PollInterval, "MIGHTYETL_WORKER_POLL_INTERVAL", "poll-interval", worker.DefaultPollInterval, 10*time.Millisecond, time.Hour, "fallback claim poll interval")
	l.Duration(&dst.LeaseDuration, "MIGHTYETL_LEASE_DURATION", "lease-duration", worker.DefaultLeaseDuration, time.Second, 24*time.Hour, "lease length (database clock)")
	l.DerivedDuration(&dst.RenewInterval, "MIGHTYETL_LEASE_RENEW_INTERVAL", "renew-interval",
		func() time.Duration { return RenewIntervalFor(dst.LeaseDuration) }, time.Millisecond, 24*time.Hour,
		"lease renewal interval (default: a third of the lease, whole milliseconds)")
	l.DerivedDuration(&dst.SafetyMargin, "MIGHTYETL_LEASE_SAFETY_MARGIN", "safety-margin",
		func() time.Duration { return SafetyMarginFor(dst.LeaseDuration) }, 0, 24*time.Hour,
		"minimum lease time kept in hand (default: a sixth of the lease, whole milliseconds)")
	l.Int(&dst.MaxAttempts, "MIGHTYETL_MAX_ATTEMPTS", "max-attempts", intake.DefaultMaxAttempts, 1, 100, "attempts per job")
	l.Duration(&dst.RetryBaseDelay, "MIGHTYETL_RETRY_BASE_DELAY", "retry-base-delay", worker.DefaultRetryBaseDelay, 0, time.Hour, "backoff base")
	l.Duration(&dst.RetryMaxDelay, "MIGHTYETL_RETRY_MAX_DELAY", "retry-max-delay", worker.DefaultRetryMaxDelay, 0, 24*time.Hour, "backoff cap")
	l.Duration(&dst.ShutdownGrace, "MIGHTYETL_SHUTDOWN_GRACE_PERIOD", "shutdown-grace", worker.DefaultShutdownGrace, 0, time.Hour, "wait for running jobs on shutdown")
	l.String(&dst.MetricsAddr, "MIGHTYETL_METRICS_ADDR", "metrics-addr", DefaultMetricsAddr, "metrics and health listen address", nonEmpty)
	l.Int(&dst.MaxBatchRecords, "MIGHTYETL_MAX_BATCH_RECORDS", "max-batch-records", intake.DefaultMaxBatchRecords, 1, 100000, "records per job")
	l.Duration(&dst.MaxJobDuration, "MIGHTYETL_MAX_JOB_DURATION", "max-job-duration", worker.DefaultMaxJobDuration, time.Second, 7*24*time.Hour, "longest one attempt of a job may run; past it the job fails etl_job_timeout")
	l.Int(&dst.ClaimOwners, "MIGHTYETL_CLAIM_OWNERS", "claim-owners", worker.DefaultClaimOwners, 0, 1000,
		"owners one claim serves, each with its weighted share and by priority within it; 0: first-come first-served")
	l.DerivedInt(&dst.WakeupSlots, "MIGHTYETL_WORKER_WAKEUP_SLOTS", "wakeup-slots", func() int {
		if dst.ClaimOwners == 0 {
			return 0
		}
		return worker.DefaultWakeupSlots(dst.Concurrency)
	}, 0, 10000,
		"execution slots besides the concurrency kept for light owners' new jobs (owners whose claimable jobs all arrived in the last 5 s), claimed at once when a wake-up finds the worker claiming a backlog or full (suggested for many owners: max(1, concurrency/64); must be 0 with MIGHTYETL_CLAIM_OWNERS=0); 0: none (the default)")
	l.Int(&dst.ChunkedSlots, "MIGHTYETL_WORKER_CHUNKED_SLOTS", "chunked-slots", worker.DefaultChunkedSlots, 0, 64,
		"execution slots for large (chunked) jobs, besides the concurrency; 0: claim none")
	l.Int(&dst.ChunkRecords, "MIGHTYETL_CHUNK_RECORDS", "chunk-records", chunked.DefaultChunkRecords, 1, 1000000,
		"records per chunk transaction of a large job")
	l.Int(&dst.ChunkBytes, "MIGHTYETL_CHUNK_BYTES", "chunk-bytes", chunked.DefaultChunkBytes, 64<<10, 256<<20,
		"payload bytes per chunk transaction of a large job, and the longest record")
	l.Int(&dst.ChunkConns, "MIGHTYETL_CHUNK_CONNECTIONS", "chunk-connections", chunked.DefaultConnections, 1, 16,
		"chunk transactions of one large job open at once, each on a connection of its own (they still commit in order)")
	RegisterNATS(l, &dst.NATS)
	RegisterMaintenance(l, &dst.Maintenance)
}

// RenewIntervalFor is the renewal interval used when
// MIGHTYETL_LEASE_RENEW_INTERVAL is not set: a third of the lease, truncated
// to whole milliseconds (30s gives 10s, 10s gives 3.333s). Truncation keeps
// it at most a third, so it always passes ValidateLease with
// SafetyMarginFor(lease).
func RenewIntervalFor(lease time.Duration) time.Duration {
	return (lease / 3).Truncate(time.Millisecond)
}

// SafetyMarginFor is the safety margin used when
// MIGHTYETL_LEASE_SAFETY_MARGIN is not set: a sixth of the lease, truncated
// to whole milliseconds (30s gives 5s, 10s gives 1.666s).
func SafetyMarginFor(lease time.Duration) time.Duration {
	return (lease / 6).Truncate(time.Millisecond)
}

func nonEmpty(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	return nil
}

// ValidateLease checks the renewal schedule against the lease: the interval
// must be positive and shorter than the lease, and the lease minus one
// interval must leave at least two intervals and at least the safety margin
// (so a renewal can be late by a whole interval, fail once and be retried,
// and still land before expiry).
func ValidateLease(lease, interval, margin time.Duration) error {
	switch {
	case interval <= 0:
		return fmt.Errorf("MIGHTYETL_LEASE_RENEW_INTERVAL: must be positive (got %s)", interval)
	case interval >= lease:
		return fmt.Errorf("MIGHTYETL_LEASE_RENEW_INTERVAL: must be shorter than MIGHTYETL_LEASE_DURATION %s (got %s)", lease, interval)
	case lease-interval < 2*interval:
		return fmt.Errorf("MIGHTYETL_LEASE_RENEW_INTERVAL: lease %s minus interval %s must leave at least two intervals; use at most %s", lease, interval, lease/3)
	case lease-interval < margin:
		return fmt.Errorf("MIGHTYETL_LEASE_RENEW_INTERVAL: lease %s minus interval %s leaves less than MIGHTYETL_LEASE_SAFETY_MARGIN %s", lease, interval, margin)
	}
	return nil
}

// LoadWorker parses args and the environment into a validated Worker config.
func LoadWorker(args []string, getenv func(string) string) (Worker, *Loader, error) {
	return LoadWorkerDev(args, getenv, nil)
}

// LoadWorkerDev is LoadWorker with the values `etlctl dev` chose, by
// variable name, in place of the defaults of the settings it names
// (Loader.DevDefaults: flags and variables still win; provenance says
// SourceDev).
func LoadWorkerDev(args []string, getenv func(string) string, dev map[string]string) (Worker, *Loader, error) {
	var w Worker
	l := NewLoader("worker", args, getenv)
	l.DevDefaults(dev)
	RegisterWorker(l, &w)
	if err := l.Parse(); err != nil {
		return w, l, err
	}
	// An explicit margin too large for the lease and a derived interval is
	// the margin's fault, so name the margin.
	if l.source("MIGHTYETL_LEASE_RENEW_INTERVAL") == SourceDerived && w.LeaseDuration-w.RenewInterval < w.SafetyMargin {
		return w, l, fmt.Errorf("MIGHTYETL_LEASE_SAFETY_MARGIN: must be at most %s with MIGHTYETL_LEASE_DURATION %s (the lease minus the derived renewal interval %s; got %s)",
			w.LeaseDuration-w.RenewInterval, w.LeaseDuration, w.RenewInterval, w.SafetyMargin)
	}
	if err := w.Validate(); err != nil {
		return w, l, err
	}
	return w, l, nil
}

// Validate checks cross-setting rules.
func (w Worker) Validate() error {
	if err := ValidateLease(w.LeaseDuration, w.RenewInterval, w.SafetyMargin); err != nil {
		return err
	}
	if err := w.NATS.Validate(); err != nil {
		return err
	}
	if err := w.Maintenance.Prune.Validate(); err != nil {
		return err
	}
	if w.WakeupSlots > w.Concurrency {
		return fmt.Errorf("MIGHTYETL_WORKER_WAKEUP_SLOTS: must be at most MIGHTYETL_WORKER_CONCURRENCY %d (got %d)", w.Concurrency, w.WakeupSlots)
	}
	if w.WakeupSlots > 0 && w.ClaimOwners == 0 {
		return fmt.Errorf("MIGHTYETL_WORKER_WAKEUP_SLOTS: must be 0 with MIGHTYETL_CLAIM_OWNERS=0 (first-come first-served takes the oldest jobs first; got %d)", w.WakeupSlots)
	}
	if w.RetryMaxDelay < w.RetryBaseDelay {
		return fmt.Errorf("MIGHTYETL_RETRY_MAX_DELAY: must be at least MIGHTYETL_RETRY_BASE_DELAY %s", w.RetryBaseDelay)
	}
	return nil
}
