package natsbridge_test

import (
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/natsbridge"
	"github.com/mightyetl/mightyetl/internal/natstest"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/startstop"
	"github.com/mightyetl/mightyetl/internal/startstop/startstoptest"
)

// TestBridgeStartStop runs the shared start/stop stress test against real
// bridges (connection, relay and request consumer; every round on one
// database and prefix, whose streams natstest.Prefix deletes at the end),
// and against bridges without NATS configured.
func TestBridgeStartStop(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	url := natstest.URL(t)
	prefix := natstest.Prefix(t)
	svc := service(t, pool)
	t.Run("Configured", func(t *testing.T) {
		startstoptest.Stress(t, func(t *testing.T) startstop.Service {
			return natsbridge.New(natsbridge.Options{
				NATS: config.NATS{URL: url, SubjectPrefix: prefix, RequestsEnabled: true, OutboxPollInterval: time.Second, OutboxBatchSize: 100},
				Pool: pool, Service: svc, MaxRequestBytes: 64 << 10, Name: "bridge-startstop-test",
			})
		}, 30*time.Second)
	})
	t.Run("NotConfigured", func(t *testing.T) {
		startstoptest.Stress(t, func(t *testing.T) startstop.Service {
			b := natsbridge.New(natsbridge.Options{Pool: pool, Service: svc})
			if b.Enabled() || b.RelayState() != "not configured" {
				t.Fatalf("bridge without NATS_URL: enabled %v, relay state %q", b.Enabled(), b.RelayState())
			}
			return b
		}, 10*time.Second)
	})
}
