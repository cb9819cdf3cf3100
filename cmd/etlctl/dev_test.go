package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mightyetl/mightyetl/client"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

// TestDevRunsTheWholeSystem starts the README's run command as a built
// binary, runs the curl line it prints exactly as printed, and waits for the
// job to succeed and load its rows. NATS is the embedded server.
func TestDevRunsTheWholeSystem(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is needed to run the printed command")
	}
	pool, url := pgtest.NewDatabase(t)
	dev := startDev(t, buildEtlctl(t), url,
		"MIGHTYETL_WORKER_POLL_INTERVAL=30s") // 30s poll: the job must arrive through the embedded NATS wake-up
	var curl, credential, consoleURL string
	dev.readUntil(t, func(l string) bool {
		if strings.HasPrefix(l, "curl ") {
			curl = l
		}
		if c, ok := strings.CutPrefix(l, "dev credential: "); ok {
			credential = strings.Replace(c, " / ", ":", 1)
		}
		if c, ok := strings.CutPrefix(l, "operator console: "); ok {
			consoleURL, _, _ = strings.Cut(c, " ")
		}
		return curl != ""
	}, "dev exited before printing a curl line", "no curl line within 90s")
	start := time.Now()
	out, err := exec.Command("sh", "-c", curl).CombinedOutput()
	if err != nil {
		t.Fatalf("curl: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`(?m)^HTTP/1\.1 202 `).Match(out) {
		t.Fatalf("curl line did not get 202:\n%s", out)
	}
	body := out[strings.LastIndex(string(out), "\r\n\r\n")+4:]
	var accepted struct{ JobRecordID string }
	if err := json.Unmarshal(body, &accepted); err != nil || accepted.JobRecordID == "" {
		t.Fatalf("body %q: %v", body, err)
	}
	testwait.For(t, 25*time.Second-time.Since(start), "the job SUCCEEDED before the 30s poll (else the wake-up path is broken)", func() bool {
		var status string
		if err := pool.QueryRow(context.Background(), `SELECT job_status FROM etl_job_records WHERE job_record_id=$1`, accepted.JobRecordID).Scan(&status); err != nil {
			t.Fatal(err)
		}
		return status == "SUCCEEDED"
	})
	var data string
	if err := pool.QueryRow(context.Background(), `SELECT data FROM processed_data WHERE job_record_id=$1`, accepted.JobRecordID).Scan(&data); err != nil {
		t.Fatal(err)
	}
	if data != "ID:a1,NAME:JANE,EMAIL:jane@example.com,AMOUNT:999.90," {
		t.Fatalf("loaded %q", data)
	}
	t.Logf("submit to SUCCEEDED via etlctl dev: %v", time.Since(start))

	// The printed console address opens with the printed credential, as an
	// operator, and shows the job.
	if consoleURL == "" || credential == "" {
		t.Fatalf("dev printed no console address (%q) or credential", consoleURL)
	}
	principal, password, _ := strings.Cut(credential, ":")
	for _, page := range []string{consoleURL, strings.TrimSuffix(consoleURL, "/") + "/jobs/" + accepted.JobRecordID} {
		req, _ := http.NewRequest("GET", page, nil)
		req.SetBasicAuth(principal, password)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.Contains(string(b), "mightyETL console") {
			t.Fatalf("console %s with the dev credential: %d", page, res.StatusCode)
		}
	}
	if err := dev.Terminate(60 * time.Second); err != nil {
		t.Fatalf("dev on SIGTERM: %v", err)
	}
}

// TestDevEmbeddedNATSIsLoopbackAndSaysUnauthenticated: the embedded NATS
// server of `etlctl dev` listens on a loopback address and the start-up
// output says plainly that it is unauthenticated.
func TestDevEmbeddedNATSIsLoopbackAndSaysUnauthenticated(t *testing.T) {
	_, url := pgtest.NewDatabase(t)
	dev := startDev(t, buildEtlctl(t), url)
	var natsLine string
	dev.readUntil(t, func(l string) bool {
		if strings.Contains(l, "nats://") {
			natsLine = l
		}
		return strings.HasPrefix(l, "mightyETL dev is running")
	}, "dev exited before it was running", "dev not running within 90s")
	if !strings.Contains(natsLine, "UNAUTHENTICATED") {
		t.Fatalf("start-up output does not say the embedded NATS is unauthenticated; NATS line %q", natsLine)
	}
	m := regexp.MustCompile(`nats://([^ ]+):(\d+)`).FindStringSubmatch(natsLine)
	if m == nil {
		t.Fatalf("no NATS address in %q", natsLine)
	}
	if ip := net.ParseIP(m[1]); ip == nil || !ip.IsLoopback() {
		t.Fatalf("embedded NATS listens on %q, want a loopback address", m[1])
	}
}

func TestCredentialsHashPrintsALine(t *testing.T) {
	cmd := exec.Command(buildEtlctl(t), "credentials", "hash", "alice")
	cmd.Stdin = strings.NewReader("correct horse battery staple\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^alice:\$argon2id\$v=19\$m=\d+,t=\d+,p=\d+\$[A-Za-z0-9+/]+\$[A-Za-z0-9+/]+\n$`).Match(out) {
		t.Fatalf("line %q", out)
	}
	if strings.Contains(string(out), "horse") {
		t.Fatal("password echoed")
	}
}

// TestDevKeepsItsIdentityAcrossRestarts: a job submitted before `etlctl dev`
// restarts is still listed and readable with the credential printed after
// the restart (the same one), and its idempotency key still replays it. The
// identity lives in MIGHTYETL_DEV_STATE_DIR/dev.json, 0600, and dev says so.
func TestDevKeepsItsIdentityAcrossRestarts(t *testing.T) {
	_, url := pgtest.NewDatabase(t)
	bin := buildEtlctl(t)
	state := t.TempDir()
	ctx := context.Background()
	records := []byte(`[{"id":"r1","name":"restart"}]`)

	first := startDev(t, bin, url, "MIGHTYETL_DEV_STATE_DIR="+state)
	c, password := first.apiClient(t)
	sub, err := c.Submit(ctx, records, "dev-restart-key-0001")
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Terminate(60 * time.Second); err != nil {
		t.Fatalf("first dev on SIGTERM: %v", err)
	}
	path := filepath.Join(state, "dev.json")
	if !strings.Contains(first.Output(), "created in "+path) {
		t.Errorf("the first run does not say where its identity lives (%s):\n%s", path, first.Output())
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("identity file %s: %v (want mode 0600)", path, err)
	}

	second := startDev(t, bin, url, "MIGHTYETL_DEV_STATE_DIR="+state)
	c2, password2 := second.apiClient(t)
	if password2 != password {
		t.Fatal("the dev password changed across the restart")
	}
	if !strings.Contains(second.Output(), "kept in "+path) {
		t.Errorf("the second run does not say its identity was kept in %s:\n%s", path, second.Output())
	}
	job, err := c2.Get(ctx, sub.JobID)
	if err != nil || job.ID != sub.JobID {
		t.Fatalf("get the earlier job after the restart: %v", err)
	}
	page, err := c2.List(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, j := range page.Jobs {
		listed = listed || j.ID == sub.JobID
	}
	if !listed {
		t.Fatalf("the earlier job is not listed after the restart (%d jobs listed)", len(page.Jobs))
	}
	again, err := c2.Submit(ctx, records, "dev-restart-key-0001")
	if err != nil {
		t.Fatal(err)
	}
	if !again.Replayed || again.JobID != sub.JobID {
		t.Fatalf("the key used before the restart: replayed %v, job %s, want the first job %s", again.Replayed, again.JobID, sub.JobID)
	}

	// --reset-identity draws a new one: the earlier job is no longer
	// visible to the new credential.
	if err := second.Terminate(60 * time.Second); err != nil {
		t.Fatalf("second dev on SIGTERM: %v", err)
	}
	third := spawnDev(t, bin, []string{"--reset-identity"}, io.Discard, append(devEnv(t, url), "MIGHTYETL_DEV_STATE_DIR="+state)...)
	c3, password3 := third.apiClient(t)
	if password3 == password {
		t.Fatal("--reset-identity kept the password")
	}
	if _, err := c3.Get(ctx, sub.JobID); !errors.Is(err, &client.Error{Code: client.CodeJobNotFound}) {
		t.Fatalf("the earlier job after --reset-identity: %v, want %s", err, client.CodeJobNotFound)
	}
}

// TestDevSecondInterruptReleasesRunningJobs: on the first SIGINT with a job
// running, dev prints a countdown to the release (the grace of
// MIGHTYETL_SHUTDOWN_GRACE_PERIOD, here five minutes, over dev's own); the
// second SIGINT releases the job at once (PENDING again, the attempt not
// charged) and dev exits. No "nats unavailable" warning is logged on the
// way.
func TestDevSecondInterruptReleasesRunningJobs(t *testing.T) {
	pool, url := pgtest.NewDatabase(t)
	var stderr syncBuffer
	dev := spawnDev(t, buildEtlctl(t), nil, &stderr, append(devEnv(t, url), "MIGHTYETL_SHUTDOWN_GRACE_PERIOD=5m")...)
	c, _ := dev.apiClient(t)
	if !strings.Contains(dev.Output(), "running jobs get 5m0s to finish (MIGHTYETL_SHUTDOWN_GRACE_PERIOD)") {
		t.Errorf("the start-up output does not state the grace period:\n%s", dev.Output())
	}
	sub, err := c.SubmitDiagnostic(context.Background(), client.DiagnosticRequest{DurationMillis: 10 * 60 * 1000}, "")
	if err != nil {
		t.Fatal(err)
	}
	status := func() (s string, attempts int) {
		if err := pool.QueryRow(context.Background(), `SELECT job_status, attempt_count FROM etl_job_records WHERE job_record_id=$1`, sub.JobID).Scan(&s, &attempts); err != nil {
			t.Fatal(err)
		}
		return s, attempts
	}
	testwait.For(t, 30*time.Second, "the diagnostic job RUNNING", func() bool { s, _ := status(); return s == "RUNNING" })

	if err := dev.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	dev.readUntil(t, func(l string) bool {
		return strings.HasPrefix(l, "draining: 1 job running, releasing it in 4m") && strings.HasSuffix(l, "; press Ctrl-C again to release it now")
	}, "dev exited before a countdown line", "no countdown line within 90s")
	if err := dev.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := dev.Wait(30 * time.Second); err != nil {
		t.Fatalf("dev after the second SIGINT: %v (a five-minute grace must not be waited out)", err)
	}
	if s, attempts := status(); s != "PENDING" || attempts != 0 {
		t.Fatalf("the running job after the release: %s with %d attempts, want PENDING with 0 (released, not charged)", s, attempts)
	}
	if strings.Contains(stderr.String(), "nats unavailable") {
		t.Fatalf("shutdown logged a NATS outage that did not happen:\n%s", stderr.String())
	}
}

// TestDevPortClashFailsBeforeStarting: with its HTTP or its metrics port
// taken, dev exits non-zero with one line naming the address and its
// setting, and started nothing: it printed nothing else and did not even
// create its database.
func TestDevPortClashFailsBeforeStarting(t *testing.T) {
	bin := buildEtlctl(t)
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	addr := held.Addr().String()
	server := pgtest.ServerURL(t)
	for _, c := range []struct{ setting, env, flag string }{
		{"MIGHTYETL_HTTP_ADDR", "MIGHTYETL_HTTP_ADDR=" + addr, "--http-addr"},
		{"MIGHTYETL_METRICS_ADDR", "MIGHTYETL_METRICS_ADDR=" + addr, "--metrics-addr"},
	} {
		t.Run(c.setting, func(t *testing.T) {
			// A name of this run's own, dropped at the end should dev have
			// created it.
			name := "mightyetl_devclash_" + strings.ToLower(strings.TrimPrefix(c.setting, "MIGHTYETL_")) + "_" + strconv.FormatInt(time.Now().UnixNano(), 36)
			t.Cleanup(func() { pgtest.DropDatabase(t, name) })
			dbURL := withDatabase(t, server, name)
			dev := spawnDev(t, bin, nil, nil, append(devEnv(t, dbURL), c.env)...)
			err := dev.Wait(60 * time.Second)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() == 0 {
				t.Fatalf("dev with %s taken: %v, want a non-zero exit", c.setting, err)
			}
			out := strings.TrimSpace(dev.Output())
			want := "etlctl dev: listen " + addr + " (" + c.setting + " / " + c.flag + "): address already in use"
			if out != want {
				t.Fatalf("output:\n%s\nwant the one line %q", out, want)
			}
			admin, err := pgx.Connect(context.Background(), server)
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close(context.Background())
			var created bool
			if err := admin.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM pg_database WHERE datname=$1)`, name).Scan(&created); err != nil {
				t.Fatal(err)
			}
			if created {
				t.Fatalf("dev created its database before it found %s taken", c.setting)
			}
		})
	}
}

// TestDevAddressFlagsWinOverVariables: --http-addr and --metrics-addr win
// over MIGHTYETL_HTTP_ADDR and MIGHTYETL_METRICS_ADDR (here both taken).
func TestDevAddressFlagsWinOverVariables(t *testing.T) {
	_, url := pgtest.NewDatabase(t)
	var taken []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		taken = append(taken, ln.Addr().String())
	}
	dev := spawnDev(t, buildEtlctl(t), []string{"--http-addr", "127.0.0.1:0", "--metrics-addr=127.0.0.1:0"}, io.Discard,
		append(devEnv(t, url), "MIGHTYETL_HTTP_ADDR="+taken[0], "MIGHTYETL_METRICS_ADDR="+taken[1])...)
	var running string
	dev.readUntil(t, func(l string) bool {
		if strings.HasPrefix(l, "mightyETL dev is running: ") {
			running = l
		}
		return running != ""
	}, "dev exited with the flags set", "dev not running within 90s")
	if strings.Contains(running, taken[0]) || strings.Contains(running, taken[1]) {
		t.Fatalf("dev used a variable's address over the flag: %q", running)
	}
}

// TestDevLogsEveryPartsSettings: dev logs the intake's and the worker's
// settings as JSON, each with its value and source: "dev" for what dev
// chose, "env" for what the environment set, "default" otherwise; secrets
// as "(set)" only. The start-up output states dev's shorter grace.
func TestDevLogsEveryPartsSettings(t *testing.T) {
	_, url := pgtest.NewDatabase(t)
	var stderr syncBuffer
	state := t.TempDir()
	dev := spawnDev(t, buildEtlctl(t), nil, &stderr, append(devEnv(t, url), "MIGHTYETL_DEV_STATE_DIR="+state)...)
	_, password := dev.apiClient(t)
	if !strings.Contains(dev.Output(), "running jobs get 10s to finish (dev's MIGHTYETL_SHUTDOWN_GRACE_PERIOD; intake and worker default to 30s)") {
		t.Errorf("the start-up output does not state dev's grace period:\n%s", dev.Output())
	}
	type setting struct{ Value, Source string }
	parts := map[string]map[string]setting{}
	for _, l := range strings.Split(stderr.String(), "\n") {
		var line map[string]json.RawMessage
		if json.Unmarshal([]byte(l), &line) != nil {
			continue
		}
		var msg string
		_ = json.Unmarshal(line["msg"], &msg)
		part, ok := strings.CutSuffix(msg, " configuration")
		if !ok {
			continue
		}
		parts[part] = map[string]setting{}
		for k, v := range line {
			var s setting
			if strings.ToUpper(k) == k && json.Unmarshal(v, &s) == nil {
				parts[part][k] = s
			}
		}
	}
	want := map[string]map[string]setting{
		"intake": {
			"MIGHTYETL_AUTH_MODE":               {"basic", "dev"},
			"MIGHTYETL_PRINCIPAL_HASH_KEY":      {"(set)", "dev"},
			"MIGHTYETL_OPERATOR_PRINCIPALS":     {"(set)", "dev"},
			"MIGHTYETL_DIAGNOSTIC_JOBS_ENABLED": {"true", "dev"},
			"MIGHTYETL_NATS_REQUESTS_ENABLED":   {"true", "dev"},
			"MIGHTYETL_SHUTDOWN_GRACE_PERIOD":   {"10s", "dev"},
			"MIGHTYETL_HTTP_ADDR":               {"127.0.0.1:0", "env"},
			"MIGHTYETL_MAX_ATTEMPTS":            {"3", "default"},
		},
		"worker": {
			"MIGHTYETL_SHUTDOWN_GRACE_PERIOD": {"10s", "dev"},
			"MIGHTYETL_METRICS_ADDR":          {"127.0.0.1:0", "env"},
			"MIGHTYETL_WORKER_CONCURRENCY":    {"8", "default"},
		},
	}
	for part, settings := range want {
		if len(parts[part]) == 0 {
			t.Errorf("no %q configuration line with settings in:\n%s", part, stderr.String())
			continue
		}
		for name, w := range settings {
			if got := parts[part][name]; got != w {
				t.Errorf("%s %s = %+v, want %+v", part, name, got, w)
			}
		}
		if got := parts[part]["NATS_URL"]; got.Source != "dev" || !strings.HasPrefix(got.Value, "nats://127.0.0.1:") {
			t.Errorf("%s NATS_URL = %+v, want the embedded server's address, source dev", part, got)
		}
	}
	b, err := os.ReadFile(filepath.Join(state, "dev.json"))
	if err != nil {
		t.Fatal(err)
	}
	var id struct{ PrincipalHashKey string }
	if err := json.Unmarshal(b, &id); err != nil || id.PrincipalHashKey == "" {
		t.Fatalf("identity file: %v", err)
	}
	if strings.Contains(stderr.String(), id.PrincipalHashKey) || strings.Contains(stderr.String(), password) {
		t.Fatal("the log holds the principal hash key or the dev password")
	}
}

// withDatabase is the server URL with its database name replaced.
func withDatabase(t *testing.T, serverURL, name string) string {
	t.Helper()
	u, err := neturl.Parse(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}
