package faultinject

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// standbyName is the standby's application_name (what
// synchronous_standby_names names) and its replication slot on the primary.
const standbyName = "fi_standby"

// replicationConf is appended to the primary's postgresql.conf before its
// first start: a physical standby streams from it. Most are PostgreSQL 15's
// defaults already; they are written out so that the setup is the one
// docs/operations/failover.md describes, whatever the packaged defaults.
const replicationConf = `
# faultinject: a primary with a streaming standby
wal_level = replica
max_wal_senders = 10
max_replication_slots = 10
hot_standby = on
`

// replicationHBA lets the standby's walreceiver and pg_basebackup connect
// over loopback TCP.
const replicationHBA = `
host replication postgres 127.0.0.1/32 trust
`

// EnableReplication configures a cluster that has not started yet as a
// primary: WAL for a physical standby, WAL senders and slots, and a
// pg_hba.conf line for replication connections on 127.0.0.1.
func (p *Postgres) EnableReplication() error {
	if err := appendFile(filepath.Join(p.dataDir, "postgresql.conf"), replicationConf); err != nil {
		return fmt.Errorf("enable replication: %w", err)
	}
	if err := appendFile(filepath.Join(p.dataDir, "pg_hba.conf"), replicationHBA); err != nil {
		return fmt.Errorf("enable replication: %w", err)
	}
	return nil
}

// appendFile appends text to an existing file, keeping its owner (the
// cluster's OS user) and mode.
func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// NewStandby makes a physical standby of primary (which must run with
// EnableReplication): pg_basebackup -R through a new replication slot
// (standbyName) into a directory of its own, with a port of its own, as the
// cluster's OS user. Its primary_conninfo names standbyName as
// application_name. extraConf is appended to its postgresql.auto.conf (the
// settings a configuration manager gives every node alike, e.g.
// synchronous_standby_names). It does not start it; call Start, which
// starts it in hot standby. Remove deletes it.
func NewStandby(ctx context.Context, primary *Postgres, extraConf string) (*Postgres, error) {
	basebackup, err := findPGTool("pg_basebackup")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp("", "mightyetl-faultinject-standby-")
	if err != nil {
		return nil, fmt.Errorf("standby directory: %w", err)
	}
	p := &Postgres{initdb: primary.initdb, pgCtl: primary.pgCtl, root: root, dataDir: filepath.Join(root, "data"),
		logFile: filepath.Join(root, "postgres.log"), port: port, cred: primary.cred}
	if p.cred != nil {
		if err := os.Chown(root, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
			_ = os.RemoveAll(root)
			return nil, fmt.Errorf("chown standby directory: %w", err)
		}
	}
	// -c fast: do not wait for a spread checkpoint. -X stream: the WAL of
	// the copy comes along. -C -S: the slot keeps the primary's WAL until
	// the standby has it. -R: standby.signal and primary_conninfo.
	// --no-sync as for initdb: the copy is thrown away.
	if out, err := p.command(ctx, basebackup, "-D", p.dataDir, "-h", "127.0.0.1", "-p", strconv.Itoa(primary.port),
		"-U", "postgres", "-c", "fast", "-X", "stream", "-C", "-S", standbyName, "-R", "--no-sync").CombinedOutput(); err != nil {
		_ = os.RemoveAll(root)
		return nil, fmt.Errorf("pg_basebackup: %v: %s", err, lastLines(out, 5))
	}
	// pg_basebackup -R wrote a primary_conninfo without application_name;
	// the last setting in the file wins.
	conf := fmt.Sprintf("\n# faultinject standby\nprimary_conninfo = 'host=127.0.0.1 port=%d user=postgres application_name=%s'\nprimary_slot_name = '%s'\n%s",
		primary.port, standbyName, standbyName, extraConf)
	if err := appendFile(filepath.Join(p.dataDir, "postgresql.auto.conf"), conf); err != nil {
		_ = os.RemoveAll(root)
		return nil, fmt.Errorf("standby configuration: %w", err)
	}
	return p, nil
}

// connect opens one connection to the cluster's postgres database.
func (p *Postgres) connect(ctx context.Context) (*pgx.Conn, error) {
	return pgx.Connect(ctx, p.URL("postgres"))
}

// exec runs statements on one fresh connection.
func (p *Postgres) exec(ctx context.Context, statements ...string) error {
	conn, err := p.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, s := range statements {
		if _, err := conn.Exec(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// WaitStreaming waits until the primary shows the standby in
// pg_stat_replication as streaming with the given sync_state ("async" or
// "sync").
func (p *Postgres) WaitStreaming(ctx context.Context, syncState string, within time.Duration) error {
	return waitFor(ctx, within, 50*time.Millisecond, "the standby to stream ("+syncState+")", func() bool {
		conn, err := p.connect(ctx)
		if err != nil {
			return false
		}
		defer conn.Close(context.WithoutCancel(ctx))
		var n int
		err = conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication
			WHERE application_name = $1 AND state = 'streaming' AND sync_state = $2`, standbyName, syncState).Scan(&n)
		return err == nil && n == 1
	})
}

// SetSynchronousStandby names the standby in synchronous_standby_names
// (ALTER SYSTEM, reload): from then on every commit with synchronous_commit
// on waits until the standby has flushed its WAL.
func (p *Postgres) SetSynchronousStandby(ctx context.Context) error {
	if err := p.exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = '"+standbyName+"'", "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("set synchronous_standby_names: %w", err)
	}
	return nil
}

// StopReceiving makes a standby stop streaming (primary_conninfo emptied
// and reloaded: the walreceiver exits and is not restarted) and waits until
// its walreceiver is gone. It stands for a network partition between
// standby and primary: the primary goes on committing (asynchronous
// replication does not wait) and the standby falls behind.
func (p *Postgres) StopReceiving(ctx context.Context, within time.Duration) error {
	if err := p.exec(ctx, "ALTER SYSTEM SET primary_conninfo = ''", "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("stop the walreceiver: %w", err)
	}
	return waitFor(ctx, within, 20*time.Millisecond, "the standby's walreceiver to exit", func() bool {
		conn, err := p.connect(ctx)
		if err != nil {
			return false
		}
		defer conn.Close(context.WithoutCancel(ctx))
		var n int
		return conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_wal_receiver`).Scan(&n) == nil && n == 0
	})
}

// WALPosition is the cluster's WAL position: pg_current_wal_lsn() on a
// primary, pg_last_wal_receive_lsn() on a standby, as bytes from 0/0.
func (p *Postgres) WALPosition(ctx context.Context) (int64, error) {
	conn, err := p.connect(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var pos int64
	err = conn.QueryRow(ctx, `SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_receive_lsn() ELSE pg_current_wal_lsn() END - '0/0'::pg_lsn)::bigint`).Scan(&pos)
	return pos, err
}

// Promote ends a standby's recovery (pg_ctl promote -w: it returns once the
// server accepts read-write transactions) and then does what an HA manager
// does on a promoted node: synchronous_standby_names is reset (ALTER SYSTEM
// RESET, pg_reload_conf()), since the standby it names was this node and
// no standby streams from it, so every commit would wait for ever. It
// returns the database clock right after the promotion (before the reset).
func (p *Postgres) Promote(ctx context.Context) (time.Time, error) {
	if out, err := p.command(ctx, p.pgCtl, "-D", p.dataDir, "-w", "-t", "60", "promote").CombinedOutput(); err != nil {
		return time.Time{}, fmt.Errorf("pg_ctl promote: %v: %s", err, lastLines(out, 5))
	}
	conn, err := p.connect(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("connect to the promoted node: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var promoted time.Time
	var inRecovery bool
	if err := conn.QueryRow(ctx, `SELECT clock_timestamp(), pg_is_in_recovery()`).Scan(&promoted, &inRecovery); err != nil {
		return time.Time{}, fmt.Errorf("read the promoted node's clock: %w", err)
	}
	if inRecovery {
		return time.Time{}, errors.New("pg_ctl promote returned but the node is still in recovery")
	}
	for _, s := range []string{"ALTER SYSTEM RESET synchronous_standby_names", "SELECT pg_reload_conf()"} {
		if _, err := conn.Exec(ctx, s); err != nil {
			return time.Time{}, fmt.Errorf("reset synchronous_standby_names on the promoted node: %w", err)
		}
	}
	return promoted, nil
}
