package metrics

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// poolCollector exports the statistics of named pgx pools at scrape time
// (mightyetl_db_pool_*{pool}): how full each pool is, and how often and how
// long callers waited for a connection. The pool label is a fixed role name
// ("exec", "renew", "requests", "health", "relay"), never a URL.
type poolCollector struct {
	pools                                        map[string]*pgxpool.Pool
	acquired, idle, total, max, waitS, emptyAcqs *prometheus.Desc
	acquires                                     *prometheus.Desc
}

// RegisterPools registers a collector of pools' statistics on reg, keyed by
// role name. Nil pools are left out.
func RegisterPools(reg prometheus.Registerer, pools map[string]*pgxpool.Pool) {
	c := &poolCollector{pools: map[string]*pgxpool.Pool{}}
	for name, p := range pools {
		if p != nil {
			c.pools[name] = p
		}
	}
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("mightyetl_db_pool_"+name, help, []string{"pool"}, nil)
	}
	c.acquired = d("acquired_connections", "Connections in use now.")
	c.idle = d("idle_connections", "Idle connections now.")
	c.total = d("total_connections", "Open connections now (acquired, idle and being opened).")
	c.max = d("max_connections", "The pool's size limit.")
	c.acquires = d("acquires_total", "Connections handed out.")
	c.emptyAcqs = d("empty_acquires_total", "Acquires that had to wait because no idle connection was free (a saturated pool).")
	c.waitS = d("acquire_wait_seconds_total", "Time callers spent acquiring connections.")
	reg.MustRegister(c)
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.acquired, c.idle, c.total, c.max, c.acquires, c.emptyAcqs, c.waitS} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	for name, p := range c.pools {
		s := p.Stat()
		g := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, name)
		}
		k := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, name)
		}
		g(c.acquired, float64(s.AcquiredConns()))
		g(c.idle, float64(s.IdleConns()))
		g(c.total, float64(s.TotalConns()))
		g(c.max, float64(s.MaxConns()))
		k(c.acquires, float64(s.AcquireCount()))
		k(c.emptyAcqs, float64(s.EmptyAcquireCount()))
		k(c.waitS, s.AcquireDuration().Seconds())
	}
}

// oldestClaimableSQL reads the age of the oldest claimable job: the first
// entry of the claim queue's (claimable_at, job_record_id) index up to the
// database clock, one index probe whatever the backlog. RUNNING jobs' queue
// rows carry their lease expiry, so an expired lease counts as claimable
// (it is: the next claim takes it over); 0 when nothing is claimable.
const oldestClaimableSQL = `SELECT coalesce(extract(epoch FROM clock_timestamp() - min(claimable_at)), 0)::float8
FROM etl_job_claim_queue WHERE claimable_at <= clock_timestamp()`

// oldestCollector exports mightyetl_oldest_pending_age_seconds at scrape
// time from one bounded query; a scrape while the database does not answer
// within a second exports nothing rather than a stale value.
type oldestCollector struct {
	pool *pgxpool.Pool
	desc *prometheus.Desc
}

// RegisterOldestPending registers the oldest-claimable-job age collector,
// reading through pool, on reg.
func RegisterOldestPending(reg prometheus.Registerer, pool *pgxpool.Pool) {
	reg.MustRegister(&oldestCollector{pool: pool, desc: prometheus.NewDesc("mightyetl_oldest_pending_age_seconds",
		"Age of the oldest job that is claimable now (PENDING and available, or its lease expired), by the database clock; 0 when none.", nil, nil)})
}

func (c *oldestCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *oldestCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var age float64
	if err := c.pool.QueryRow(ctx, oldestClaimableSQL).Scan(&age); err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, age)
}
