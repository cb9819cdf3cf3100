package faultinject

import (
	"context"
	"fmt"
	"net/url"
	"time"
)

// Replication says whether the system's PostgreSQL has a streaming standby
// and how commits wait for it.
type Replication string

// Replication modes (Config.Replication).
const (
	// ReplicationNone: one cluster, no standby (the zero value).
	ReplicationNone Replication = ""
	// ReplicationSync: a standby named in synchronous_standby_names; a
	// commit returns once the standby has flushed its WAL.
	ReplicationSync Replication = "sync"
	// ReplicationAsync: a standby that streams as fast as it can; a
	// commit does not wait for it.
	ReplicationAsync Replication = "async"
)

// failoverParams are the connection parameters every binary gets with a
// standby: try the hosts in order and keep only a read-write session (the
// standby refuses until promoted; a dead primary refuses at once), and give
// up on one host after 5 s (a host that drops packets would otherwise hold
// a connection attempt for the kernel's TCP timeout).
const failoverParams = "sslmode=disable&target_session_attrs=read-write&connect_timeout=5"

// failoverURL is the multi-host URL form of the primary and the standby:
// postgres://user@h1:p1,h2:p2/db?target_session_attrs=read-write.
func failoverURL(primary, standby *Postgres, database string) string {
	return "postgres://postgres@" + primary.Addr() + "," + standby.Addr() + "/" + url.PathEscape(database) + "?" + failoverParams
}

// failoverDSN is the keyword/value form of the same:
// host=h1,h2 port=p1,p2 ... target_session_attrs=read-write.
func failoverDSN(primary, standby *Postgres, database string) string {
	return fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres dbname=%s sslmode=disable target_session_attrs=read-write connect_timeout=5",
		primary.port, standby.port, database)
}

// startStandby gives the running primary a streaming standby as
// s.cfg.Replication asks. With ReplicationSync both nodes carry
// synchronous_standby_names = the standby (as a configuration manager
// writes the same settings on every node), which is why Failover resets it
// on the promoted node.
func (s *System) startStandby(ctx context.Context) error {
	extra := ""
	if s.cfg.Replication == ReplicationSync {
		extra = "synchronous_standby_names = '" + standbyName + "'\n"
	}
	var err error
	if s.Standby, err = NewStandby(ctx, s.PG, extra); err != nil {
		return err
	}
	if err := s.Standby.Start(ctx); err != nil {
		return fmt.Errorf("start the standby: %w", err)
	}
	if err := s.PG.WaitStreaming(ctx, "async", 60*time.Second); err != nil {
		return err
	}
	if s.cfg.Replication == ReplicationSync {
		if err := s.PG.SetSynchronousStandby(ctx); err != nil {
			return err
		}
		if err := s.PG.WaitStreaming(ctx, "sync", 60*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// intakeDatabaseURL and workerDatabaseURL are the DATABASE_URL values of
// the binaries. Without a standby: the primary, the workers through the
// fault proxy. With one: the multi-host forms (keyword/value for the
// intake and etlctl, URL for the workers, so both parsers are exercised),
// directly, not through the proxy.
func (s *System) intakeDatabaseURL() string {
	if s.Standby == nil {
		return s.PG.URL(databaseName)
	}
	return failoverDSN(s.PG, s.Standby, databaseName)
}

func (s *System) workerDatabaseURL() string {
	if s.Standby == nil {
		return "postgres://postgres@" + s.Proxy.Addr() + "/" + databaseName + "?sslmode=disable"
	}
	return failoverURL(s.PG, s.Standby, databaseName)
}

// FailoverTimes are what Failover measured.
type FailoverTimes struct {
	Killed   time.Time     // harness clock: pg_ctl stop -m immediate returned
	Promoted time.Time     // the new primary's clock right after promotion
	Outage   time.Duration // harness clock: from before the kill to after the promotion and reset
}

// Failover kills the primary (pg_ctl stop -m immediate: the postmaster and
// every backend quit at once, as on a crash) and promotes the standby,
// resetting its synchronous_standby_names (see Postgres.Promote). The
// standby becomes s.PG's successor: the binaries find it through their
// multi-host DATABASE_URL. The harness's own pool (s.DB) uses the same
// multi-host URL and follows too.
func (s *System) Failover(ctx context.Context) (FailoverTimes, error) {
	if s.Standby == nil {
		return FailoverTimes{}, fmt.Errorf("failover: the system has no standby (Config.Replication)")
	}
	var ft FailoverTimes
	start := time.Now()
	if err := s.PG.StopImmediate(ctx); err != nil {
		return ft, fmt.Errorf("kill the primary: %w", err)
	}
	ft.Killed = time.Now()
	promoted, err := s.Standby.Promote(ctx)
	if err != nil {
		return ft, err
	}
	ft.Promoted = promoted
	ft.Outage = time.Since(start)
	return ft, nil
}

// ResumedAfter is the time from promoted (the new primary's clock) to the
// first job that reached a terminal state on the new primary, read from
// updated_at there (the same clock), or -1 when none has yet.
func ResumedAfter(ctx context.Context, s *System, promoted time.Time) (time.Duration, error) {
	var first *time.Time
	if err := s.DB.QueryRow(ctx, `SELECT min(updated_at) FROM etl_job_records
		WHERE job_status IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND updated_at > $1`, promoted).Scan(&first); err != nil {
		return 0, fmt.Errorf("first job finished after the promotion: %w", err)
	}
	if first == nil {
		return -1, nil
	}
	return first.Sub(promoted), nil
}
