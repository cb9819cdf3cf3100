package main_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/binarytest"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testio"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

// TestMain removes the worker binary built for the tests once they ran.
func TestMain(m *testing.M) { binarytest.Main(m) }

// startWorker starts the worker binary with the test's environment minus
// every mightyETL, database, NATS and OpenTelemetry setting, plus env; it is
// killed when the test ends.
func startWorker(t *testing.T, env ...string) *binarytest.Process {
	t.Helper()
	return binarytest.Spawn(t, binarytest.Options{Path: binarytest.Binary(t, "worker"), Env: binarytest.Env(binarytest.Isolated, env...)})
}

func statusOf(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) (status string, owner *string) {
	t.Helper()
	if err := pool.QueryRow(context.Background(), `SELECT job_status, lease_owner_id FROM etl_job_records WHERE job_record_id=$1`, id).Scan(&status, &owner); err != nil {
		t.Fatal(err)
	}
	return
}

func TestBinaryRunsJobsAndDrainsOnSIGTERM(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	jobs := make([]pg.NewJob, 20)
	for i := range jobs {
		jobs[i] = pg.NewJob{Kind: pg.KindETLRecords, Payload: fmt.Sprintf(`[{"id":"r%d","name":"ada","email":"ADA@EXAMPLE.COM","amount":"1.005"}]`, i)}
	}
	ids := pgtest.InsertJobs(t, pool, jobs...)
	p := startWorker(t, "DATABASE_URL="+url, "MIGHTYETL_METRICS_ADDR=127.0.0.1:0", "MIGHTYETL_WORKER_POLL_INTERVAL=50ms")
	testwait.For(t, time.Minute, "jobs succeeded", func() bool {
		var n int
		_ = pool.QueryRow(context.Background(), `SELECT count(*) FROM etl_job_records WHERE job_status='SUCCEEDED'`).Scan(&n)
		return n == len(ids)
	})
	var data string
	if err := pool.QueryRow(context.Background(), `SELECT data FROM processed_data WHERE job_record_id=$1`, ids[0]).Scan(&data); err != nil {
		t.Fatal(err)
	}
	if data != "ID:r0,NAME:ADA,EMAIL:ada@example.com,AMOUNT:1.01," {
		t.Fatalf("loaded %q", data)
	}
	if err := p.Terminate(time.Minute); err != nil {
		t.Fatalf("worker on SIGTERM: %v; output:\n%s", err, p.Output())
	}
}

func TestBinaryRejectsBadConfigurationWithOneLine(t *testing.T) {
	cases := map[string][]string{
		"zero interval":        {"MIGHTYETL_LEASE_RENEW_INTERVAL=0s"},
		"negative interval":    {"MIGHTYETL_LEASE_RENEW_INTERVAL=-1s"},
		"interval equal lease": {"MIGHTYETL_LEASE_DURATION=30s", "MIGHTYETL_LEASE_RENEW_INTERVAL=30s"},
		"insufficient margin":  {"MIGHTYETL_LEASE_DURATION=10s", "MIGHTYETL_LEASE_RENEW_INTERVAL=3s", "MIGHTYETL_LEASE_SAFETY_MARGIN=8s"},
		"lease too short":      {"MIGHTYETL_LEASE_DURATION=500ms"},
		"attempts":             {"MIGHTYETL_MAX_ATTEMPTS=0"},
		"worker id":            {"MIGHTYETL_WORKER_ID=short"},
		"concurrency":          {"MIGHTYETL_WORKER_CONCURRENCY=abc"},
	}
	for name, env := range cases {
		t.Run(name, func(t *testing.T) {
			textfiles := t.TempDir()
			var stderr testio.SyncBuffer
			p := binarytest.Spawn(t, binarytest.Options{Path: binarytest.Binary(t, "worker"), Stderr: &stderr,
				Env: binarytest.Env(binarytest.Isolated, append(env, "MIGHTYETL_METRICS_TEXTFILE_DIR="+textfiles)...)})
			err := p.Wait(time.Minute)
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != 2 {
				t.Fatalf("exit %v, want status 2; stderr %q", err, stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], "MIGHTYETL_") {
				t.Fatalf("want one line naming the setting, got %q", stderr.String())
			}
			// The rejection is counted where a textfile collector exports it.
			prom, err := os.ReadFile(filepath.Join(textfiles, "mightyetl_worker_config_rejections.prom"))
			if err != nil || !strings.Contains(string(prom), `mightyetl_config_rejections_total{binary="worker"} 1`) {
				t.Fatalf("rejection metric: %q %v", prom, err)
			}
		})
	}
}

// TestSIGKILLedWorkersJobIsReclaimedAfterDatabaseExpiry is the crash-recovery
// black box: worker A holds a job and is killed with SIGKILL; worker B takes
// it once the database says A's lease expired, with a greater fencing token,
// and loads it exactly once.
func TestSIGKILLedWorkersJobIsReclaimedAfterDatabaseExpiry(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	payload := `{"durationMillis":1500,"records":[{"id":"k1"},{"id":"k2"}],"failWith":null}`
	id := pgtest.InsertJobs(t, pool, pg.NewJob{Kind: pg.KindDiagnostic, Payload: payload})[0]
	common := []string{"DATABASE_URL=" + url, "MIGHTYETL_METRICS_ADDR=127.0.0.1:0", "MIGHTYETL_WORKER_POLL_INTERVAL=50ms",
		"MIGHTYETL_LEASE_DURATION=2s", "MIGHTYETL_LEASE_RENEW_INTERVAL=500ms", "MIGHTYETL_LEASE_SAFETY_MARGIN=500ms"}
	a := startWorker(t, append(common, "MIGHTYETL_WORKER_ID=crash-worker-a")...)
	testwait.For(t, time.Minute, "A holds the job", func() bool {
		st, owner := statusOf(t, pool, id)
		return st == "RUNNING" && owner != nil && *owner == "crash-worker-a"
	})
	var tokenA int64
	if err := pool.QueryRow(context.Background(), `SELECT lease_fencing_token FROM etl_job_records WHERE job_record_id=$1`, id).Scan(&tokenA); err != nil {
		t.Fatal(err)
	}
	a.Kill()
	killed := time.Now()
	b := startWorker(t, append(common, "MIGHTYETL_WORKER_ID=crash-worker-b")...)
	var reclaimed time.Duration
	var tokenB *int64
	testwait.For(t, time.Minute, "B holds the job", func() bool {
		var st string
		var owner *string
		if err := pool.QueryRow(context.Background(), `SELECT job_status, lease_owner_id, lease_fencing_token FROM etl_job_records WHERE job_record_id=$1`, id).Scan(&st, &owner, &tokenB); err != nil {
			t.Fatal(err)
		}
		if st == "RUNNING" && owner != nil && *owner == "crash-worker-b" {
			reclaimed = time.Since(killed)
			return true
		}
		if st == "SUCCEEDED" {
			t.Fatal("job finished before B held it: A was not killed mid-job")
		}
		return false
	})
	if *tokenB <= tokenA {
		t.Fatalf("B's fencing token %d not greater than A's %d", *tokenB, tokenA)
	}
	t.Logf("crash-to-reclaim %v (lease 2s)", reclaimed)
	testwait.For(t, time.Minute, "job succeeded", func() bool { st, _ := statusOf(t, pool, id); return st == "SUCCEEDED" })
	var rows, attempts int
	if err := pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM processed_data WHERE job_record_id=$1), attempt_count FROM etl_job_records WHERE job_record_id=$1`, id).Scan(&rows, &attempts); err != nil {
		t.Fatal(err)
	}
	if rows != 2 || attempts != 2 {
		t.Fatalf("rows %d attempts %d, want 2 and 2", rows, attempts)
	}
	var lifecycle int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM etl_outbox_job_events WHERE job_record_id=$1 AND job_status='SUCCEEDED'`, id).Scan(&lifecycle); err != nil || lifecycle != 1 {
		t.Fatalf("success events %d %v", lifecycle, err)
	}
	_ = b // B is stopped by the test cleanup
}

// TestTakenMetricsPortFailsFirstNamingTheSetting: with its metrics port
// taken the worker exits 1 with one line naming the address and
// MIGHTYETL_METRICS_ADDR, before it tries the database (whose URL points at
// a closed port).
func TestTakenMetricsPortFailsFirstNamingTheSetting(t *testing.T) {
	t.Parallel()
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	p := startWorker(t, "DATABASE_URL=postgres://postgres@127.0.0.1:1/mightyetl?connect_timeout=1", "MIGHTYETL_METRICS_ADDR="+held.Addr().String())
	err = p.Wait(time.Minute)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("worker with its metrics port taken: %v, want exit status 1", err)
	}
	want := "worker: listen " + held.Addr().String() + " (MIGHTYETL_METRICS_ADDR / --metrics-addr): address already in use"
	if out := strings.TrimSpace(p.Output()); out != want {
		t.Fatalf("output:\n%s\nwant the one line %q", out, want)
	}
}
