package config_test

import (
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/console"
	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/httpapi"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/outbox"
	"github.com/mightyetl/mightyetl/internal/worker"
)

// An intake configured by nothing gets exactly the defaults the library
// structs apply to their zero values: configuration and library cannot
// disagree about a default.
func TestIntakeDefaultsAreTheLibraryDefaults(t *testing.T) {
	c, _, err := config.LoadIntake(nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	api := httpapi.Options{}.WithDefaults()
	svc := intake.Options{}.WithDefaults()
	consumer := events.RequestConsumerOptions{}.WithDefaults()
	limits := events.RequestsLimits{}.WithDefaults()
	relay := outbox.Options{}.WithDefaults()
	cons := console.Options{}.WithDefaults()
	for _, d := range []struct {
		name            string
		config, library any
	}{
		{"MIGHTYETL_HTTP_ADDR", c.HTTPAddr, api.Addr},
		{"MIGHTYETL_MAX_PAYLOAD_BYTES", int64(c.MaxPayloadBytes), api.MaxPayloadBytes},
		{"MIGHTYETL_INTAKE_MAX_INFLIGHT_BYTES", int64(c.MaxInFlightBytes), api.MaxInFlightBytes},
		{"MIGHTYETL_WORKER_POLL_INTERVAL", c.WorkerPollInterval, api.PollInterval},
		{"MIGHTYETL_MAX_BATCH_RECORDS", c.MaxBatchRecords, svc.MaxBatchRecords},
		{"MIGHTYETL_MAX_ATTEMPTS", c.MaxAttempts, svc.MaxAttempts},
		{"MIGHTYETL_MAX_PAYLOAD_BYTES (console replay)", int64(c.MaxPayloadBytes), cons.MaxPayloadBytes},
		{"MIGHTYETL_CONSOLE_BULK_CANCEL_CAP", c.ConsoleBulkCancelCap, cons.BulkCancelCap},
		{"MIGHTYETL_NATS_REQUEST_CONCURRENCY", c.NATS.RequestConcurrency, consumer.Concurrency},
		{"MIGHTYETL_NATS_REQUEST_MAX_DELIVERIES", c.NATS.RequestMaxDeliveries, consumer.MaxDeliveries},
		{"MIGHTYETL_NATS_REQUESTS_MAX_BYTES", int64(c.NATS.RequestsMaxBytes), limits.MaxBytes},
		{"MIGHTYETL_NATS_REQUESTS_MAX_PER_PRINCIPAL", int64(c.NATS.RequestsMaxPerPrincipal), limits.MaxPerPrincipal},
		{"MIGHTYETL_OUTBOX_POLL_INTERVAL", c.NATS.OutboxPollInterval, relay.PollInterval},
		{"MIGHTYETL_OUTBOX_BATCH_SIZE", c.NATS.OutboxBatchSize, relay.BatchSize},
		{"MIGHTYETL_NATS_SUBJECT_PREFIX", c.NATS.SubjectPrefix, events.DefaultPrefix},
	} {
		if d.config != d.library {
			t.Errorf("%s: configuration default %v, library default %v", d.name, d.config, d.library)
		}
	}
}

// A worker configured by nothing gets exactly worker.Config's defaults.
func TestWorkerDefaultsAreTheLibraryDefaults(t *testing.T) {
	c, _, err := config.LoadWorker(nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	w := worker.Config{}.WithDefaults()
	for _, d := range []struct {
		name            string
		config, library any
	}{
		{"MIGHTYETL_WORKER_CONCURRENCY", c.Concurrency, w.Concurrency},
		{"MIGHTYETL_WORKER_POLL_INTERVAL", c.PollInterval, w.PollInterval},
		{"MIGHTYETL_LEASE_DURATION", c.LeaseDuration, w.LeaseDuration},
		{"MIGHTYETL_LEASE_RENEW_INTERVAL", c.RenewInterval, w.RenewInterval},
		{"MIGHTYETL_LEASE_SAFETY_MARGIN", c.SafetyMargin, w.SafetyMargin},
		{"MIGHTYETL_RETRY_BASE_DELAY", c.RetryBaseDelay, w.RetryBaseDelay},
		{"MIGHTYETL_RETRY_MAX_DELAY", c.RetryMaxDelay, w.RetryMaxDelay},
		{"MIGHTYETL_SHUTDOWN_GRACE_PERIOD", c.ShutdownGrace, w.ShutdownGrace},
		{"MIGHTYETL_MAX_JOB_DURATION", c.MaxJobDuration, w.MaxJobDuration},
		{"MIGHTYETL_WORKER_CHUNKED_SLOTS", c.ChunkedSlots, w.ChunkedSlots},
		{"MIGHTYETL_CLAIM_OWNERS", c.ClaimOwners, w.ClaimOwners},
		{"MIGHTYETL_WORKER_WAKEUP_SLOTS", c.WakeupSlots, w.WakeupSlots},
		{"MIGHTYETL_CHUNK_RECORDS", c.ChunkRecords, w.ChunkRecords},
		{"MIGHTYETL_CHUNK_BYTES", c.ChunkBytes, w.ChunkBytes},
		{"MIGHTYETL_CHUNK_CONNECTIONS", c.ChunkConns, w.ChunkConns},
		{"MIGHTYETL_MAX_ATTEMPTS (worker and intake)", c.MaxAttempts, intake.Options{}.WithDefaults().MaxAttempts},
		{"MIGHTYETL_WORKER_POLL_INTERVAL (intake's Retry-After)", c.PollInterval, httpapi.Options{}.WithDefaults().PollInterval},
		// worker.DefaultOwnerID: host-pid-random; the random part differs.
		{"MIGHTYETL_WORKER_ID (host-pid)", hostPID(c.WorkerID), hostPID(w.OwnerID)},
	} {
		if d.config != d.library {
			t.Errorf("%s: configuration default %v, library default %v", d.name, d.config, d.library)
		}
	}
}

// hostPID is a worker id without its random part.
func hostPID(id string) string {
	if i := strings.LastIndex(id, "-"); i >= 0 {
		return id[:i]
	}
	return id
}
