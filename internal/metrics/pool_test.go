package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The pool collector exports each named pool's statistics at scrape time,
// and the oldest-pending collector the age of the oldest claimable job by
// the database clock (0 with none): the dashboard's pool saturation and
// oldest pending age panels read them.
func TestPoolAndOldestPendingCollectors(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	reg := prometheus.NewRegistry()
	metrics.RegisterPools(reg, map[string]*pgxpool.Pool{"requests": pool, "absent": nil})
	metrics.RegisterOldestPending(reg, pool)

	want := `
# HELP mightyetl_oldest_pending_age_seconds Age of the oldest job that is claimable now (PENDING and available, or its lease expired), by the database clock; 0 when none.
# TYPE mightyetl_oldest_pending_age_seconds gauge
mightyetl_oldest_pending_age_seconds 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "mightyetl_oldest_pending_age_seconds"); err != nil {
		t.Fatal(err)
	}
	id := pgtest.InsertJobs(t, pool, pg.NewJob{Payload: `[{"id":"a"}]`})[0]
	pgtest.MakeAvailable(t, pool, id, 90*time.Second)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	pools := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			got[mf.GetName()] = v
			for _, l := range m.GetLabel() {
				if l.GetName() == "pool" {
					pools[l.GetValue()] = true
				}
			}
		}
	}
	if age := got["mightyetl_oldest_pending_age_seconds"]; age < 90 || age > 3600 {
		t.Fatalf("oldest pending age %v s, want about 90", age)
	}
	if !pools["requests"] || pools["absent"] || len(pools) != 1 {
		t.Fatalf("pool labels %v, want requests only", pools)
	}
	for _, name := range []string{"acquired_connections", "idle_connections", "total_connections", "max_connections",
		"acquires_total", "empty_acquires_total", "acquire_wait_seconds_total"} {
		if _, ok := got["mightyetl_db_pool_"+name]; !ok {
			t.Errorf("mightyetl_db_pool_%s not exported", name)
		}
	}
	if got["mightyetl_db_pool_max_connections"] <= 0 || got["mightyetl_db_pool_acquires_total"] <= 0 {
		t.Fatalf("pool stats %v", got)
	}
}
