package main_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

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
		if c, ok := strings.CutPrefix(l, "dev credential (printed once): "); ok {
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
