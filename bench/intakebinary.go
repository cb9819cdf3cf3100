package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/bcrypt"

	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/binarytest"
	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/pg"
)

const (
	// intakeBinaryPrincipals is how many Basic principals (and request
	// subjects) the load is spread over.
	intakeBinaryPrincipals = 4
	// benchMaxPayloadBytes is the intake's payload limit in this scenario:
	// its bodies are one record, far below it.
	benchMaxPayloadBytes = 64 << 10
	// maxIntakeBinaryDuration caps each timed part: the machines it runs on
	// are small and shared.
	maxIntakeBinaryDuration = 15 * time.Second
	// intakeStopGrace is how long the binary gets after SIGTERM before it
	// is killed.
	intakeStopGrace = 10 * time.Second
	// intakeDurable is the request consumer's durable name, the product
	// default (events.RequestConsumerOptions).
	intakeDurable = "mightyetl-intake"
	// pgbenchTable is the scratch table of the pgbench baseline.
	pgbenchTable = "bench_pgbench_insert"
)

// intakeBinaryRequests is the number of JetStream requests published.
func intakeBinaryRequests(quick bool) int {
	if quick {
		return 2_000
	}
	return 20_000
}

// intakeBinary measures the real cmd/intake binary on the bench database:
// HTTP intake (Basic auth, intakeConcurrency clients), event-driven intake
// through its JetStream request consumer (when NATS is configured), and, with
// the binary stopped, a pgbench single-row INSERT baseline on the same
// server, so the ratios in the report compare figures of one run.
func (h *harness) intakeBinary(ctx context.Context) (results []Result, err error) {
	if err := h.fresh(ctx); err != nil {
		return nil, err
	}
	// Both sides connect with the one -database-url (the intake's pgx and
	// pgbench's libpq alike default to sslmode=prefer: TLS whenever the
	// server offers it); each result records what that URL gives.
	conn := h.connectionSettings(ctx)
	defer func() {
		for i := range results {
			if results[i].Settings == nil {
				results[i].Settings = map[string]string{}
			}
			maps.Copy(results[i].Settings, conn)
		}
	}()
	dur := min(h.o.Duration, maxIntakeBinaryDuration)
	results, err = h.intakeBinaryRuns(ctx, dur)
	if err != nil {
		return results, err
	}
	// pgbench runs on a fresh database: the intake's tables of the parts
	// above would have autovacuum (its insert threshold) work beside it.
	if err := h.fresh(ctx); err != nil {
		return results, err
	}
	base, err := h.pgbenchInsert(ctx, dur)
	return append(results, base), err
}

// connectionSettings is what a connection made with the bench database URL
// gets: TLS (pg_stat_ssl) and synchronous_commit (a URL may set it with
// options=-c%20synchronous_commit%3Doff, which pgbench's libpq honours too).
func (h *harness) connectionSettings(ctx context.Context) map[string]string {
	var tls, syncCommit string
	err := h.pool.QueryRow(ctx, `SELECT coalesce((SELECT CASE WHEN ssl THEN 'on (' || version || ')' ELSE 'off' END
    FROM pg_stat_ssl WHERE pid = pg_backend_pid()), 'unknown'), current_setting('synchronous_commit')`).Scan(&tls, &syncCommit)
	if err != nil {
		return map[string]string{"database_tls": "unknown"}
	}
	return map[string]string{"database_tls": tls + ", the same URL on both sides", "synchronous_commit": syncCommit}
}

// intakeBinaryRuns starts cmd/intake, runs the HTTP and JetStream parts
// against it, then stops it and deletes the run's NATS streams.
func (h *harness) intakeBinaryRuns(ctx context.Context, dur time.Duration) (results []Result, err error) {
	dir, err := os.MkdirTemp("", "mightyetl-bench-intake")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	creds, err := writeBenchCredentials(dir, intakeBinaryPrincipals)
	if err != nil {
		return nil, err
	}
	// A prefix of its own per run: streams of earlier or concurrent runs on
	// the same NATS server are never mixed in.
	subjects, err := events.NewSubjects("benchintake" + randomHex(6))
	if err != nil {
		return nil, err
	}
	hashKey := randomHex(32)
	p, base, err := h.startIntake(ctx, creds.path, subjects.Prefix(), hashKey)
	if err != nil {
		return nil, err
	}
	defer func() {
		if serr := h.stopIntake(ctx, p, subjects); serr != nil && err == nil {
			err = serr
		}
	}()

	httpRes, err := h.intakeBinaryHTTP(ctx, base, creds, dur)
	results = append(results, httpRes)
	if err != nil || h.o.NATSURL == "" {
		return results, err
	}
	// JetStream requests come from principals of their own, so the count
	// that measures them never includes an HTTP request of the previous
	// phase that the intake committed after its client gave up on it.
	jsPrincipals := make([]string, len(creds.principals))
	jsScopes := make([]string, len(creds.principals))
	for i := range jsPrincipals {
		jsPrincipals[i] = "bench-js-principal-" + strconv.Itoa(i)
		jsScopes[i] = auth.ScopeHash([]byte(hashKey), jsPrincipals[i])
	}
	jsRes, err := h.intakeBinaryJetStream(ctx, subjects, jsPrincipals, jsScopes)
	return append(results, jsRes), err
}

// benchCredentials are the Basic principals of one run: the credentials
// file holding their bcrypt hashes and the Authorization value of each.
// Passwords are random per run and never written anywhere else.
type benchCredentials struct {
	path       string
	principals []string
	headers    []string
}

// writeBenchCredentials writes n "principal:bcrypt-hash" lines into
// dir/credentials. bcrypt.MinCost is the cheapest cost the intake accepts;
// the cost is paid once per principal (warm-up), then the intake's
// verification cache answers.
func writeBenchCredentials(dir string, n int) (benchCredentials, error) {
	c := benchCredentials{path: filepath.Join(dir, "credentials")}
	var file strings.Builder
	for i := range n {
		principal := "bench-principal-" + strconv.Itoa(i)
		password := randomHex(16)
		hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
		if err != nil {
			return c, fmt.Errorf("hash bench password: %w", err)
		}
		fmt.Fprintf(&file, "%s:%s\n", principal, hash)
		c.principals = append(c.principals, principal)
		c.headers = append(c.headers, "Basic "+base64.StdEncoding.EncodeToString([]byte(principal+":"+password)))
	}
	if err := os.WriteFile(c.path, []byte(file.String()), 0o600); err != nil {
		return c, fmt.Errorf("write credentials file: %w", err)
	}
	return c, nil
}

// startIntake starts cmd/intake on a free loopback port with Basic auth and,
// when the harness has NATS, the relay and request consumer under prefix;
// extra are further settings (KEY=VALUE). It
// returns once GET /readyz answers 200, with the API's base URL.
func (h *harness) startIntake(ctx context.Context, credsFile, prefix, hashKey string, extra ...string) (*workerProc, string, error) {
	addr, err := freeLoopbackAddr()
	if err != nil {
		return nil, "", err
	}
	env := []string{
		"MIGHTYETL_HTTP_ADDR=" + addr,
		"MIGHTYETL_AUTH_MODE=basic",
		"MIGHTYETL_BASIC_CREDENTIALS_FILE=" + credsFile,
		"MIGHTYETL_PRINCIPAL_HASH_KEY=" + hashKey,
		"MIGHTYETL_NATS_SUBJECT_PREFIX=" + prefix,
	}
	if h.o.NATSURL != "" {
		// The JetStream phase publishes its whole burst at once, so every
		// request of a principal may wait in the stream together: the
		// per-principal limit takes the whole burst, and the stream (a
		// limit, not an allocation) is sized so that it still holds at most
		// 1/events.RequestsPrincipalShares of it at the bench's payload
		// limit, as the intake requires.
		perPrincipal := int64(intakeBinaryRequests(h.o.Quick))
		streamBytes := perPrincipal * (benchMaxPayloadBytes + events.RequestStoreOverhead) * events.RequestsPrincipalShares
		env = append(env, "NATS_URL="+h.o.NATSURL, "MIGHTYETL_NATS_REQUESTS_ENABLED=true",
			"MIGHTYETL_MAX_PAYLOAD_BYTES="+strconv.FormatInt(benchMaxPayloadBytes, 10),
			"MIGHTYETL_NATS_REQUESTS_MAX_PER_PRINCIPAL="+strconv.FormatInt(perPrincipal, 10),
			"MIGHTYETL_NATS_REQUESTS_MAX_BYTES="+strconv.FormatInt(streamBytes, 10))
	}
	p, err := h.spawn(ctx, "intake", append(env, extra...))
	if err != nil {
		return nil, "", err
	}
	base := "http://" + addr
	if err := waitReadyz(ctx, p, base+"/readyz", 30*time.Second); err != nil {
		p.Kill()
		return nil, "", err
	}
	return p, base, nil
}

// freeLoopbackAddr returns a loopback address whose port was free a moment
// ago (another process could take it before the intake binds it; the
// intake then exits and the run fails with its log).
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr, nil
}

// waitReadyz polls url until it answers 200, the process exits or timeout.
func waitReadyz(ctx context.Context, p *workerProc, url string, timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	return p.WaitReady(ctx, timeout, "intake GET /readyz 200", binarytest.HTTPOK(client, url))
}

// stopIntake stops the binary with SIGTERM (SIGKILL after intakeStopGrace),
// then deletes the run's streams: only now, since a running request
// consumer would create the request stream again.
func (h *harness) stopIntake(ctx context.Context, p *workerProc, s events.Subjects) error {
	stopErr := p.Terminate(intakeStopGrace)
	if stopErr != nil {
		stopErr = fmt.Errorf("stop intake binary: %w: %s", stopErr, p.Tail(20))
	}
	if h.o.NATSURL == "" {
		return stopErr
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := deleteStreams(dctx, h.o.NATSURL, s.RequestsStream(), s.LifecycleStream()); err != nil && stopErr == nil {
		return err
	}
	return stopErr
}

// deleteStreams deletes the named streams that exist.
func deleteStreams(ctx context.Context, url string, names ...string) error {
	nc, err := nats.Connect(url, nats.Name("mightyetl-bench"))
	if err != nil {
		return fmt.Errorf("connect NATS: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("delete stream %s: %w", name, err)
		}
	}
	return nil
}

// intakeBinaryHTTP warms every principal with one request (its one bcrypt
// verification), then has intakeConcurrency clients POST /api/etl/jobs for
// dur and checks that every accepted job is stored.
func (h *harness) intakeBinaryHTTP(ctx context.Context, base string, creds benchCredentials, dur time.Duration) (Result, error) {
	natsMode := "off (NATS_URL unset)"
	if h.o.NATSURL != "" {
		natsMode = "on: outbox relay and request consumer running"
	}
	res := Result{System: "mightyetl", Scenario: "intake-binary", Variant: "http", Metrics: map[string]float64{},
		Settings: map[string]string{
			"server":   "cmd/intake binary (go build), product defaults (pool, group commit)",
			"auth":     fmt.Sprintf("basic, %d principals, bcrypt cost %d; one warm-up request per principal before the window", len(creds.principals), bcrypt.MinCost),
			"clients":  strconv.Itoa(intakeConcurrency) + ", spread over the principals, keep-alive",
			"duration": dur.String(),
			"body":     "1 ETL record",
			"nats":     natsMode,
		}}
	if dur < h.o.Duration {
		res.Settings["duration"] += " (capped)"
	}
	client, closeClient := newLoadClient()
	defer closeClient()
	url := base + "/api/etl/jobs"
	for i, hdr := range creds.headers {
		status, err := postJob(ctx, client, url, []byte(intakeBody), func(r *http.Request) { r.Header.Set("Authorization", hdr) })
		if err != nil {
			return res, fmt.Errorf("warm-up request of principal %d: %w", i, err)
		}
		if status != http.StatusAccepted {
			return res, fmt.Errorf("warm-up request of principal %d: status %d, want 202", i, status)
		}
	}
	warm := len(creds.headers)
	res.Settings["load_client"] = h.o.IntakeClient
	load := h.postLoad(ctx, strings.TrimPrefix(base, "http://"), dur, func(c int) string { return creds.headers[c%len(creds.headers)] })
	accepted := load.report(&res)
	stored, err := h.count(ctx, `SELECT count(*) FROM etl_job_records WHERE job_status = $1`, pg.StatusPending)
	if err != nil {
		return res, err
	}
	res.Metrics["stored_pending"] = float64(stored)
	if int(stored) < accepted+warm {
		return res, fmt.Errorf("intake-binary http: %d accepted (+%d warm-up) but %d stored", accepted, warm, stored)
	}
	return res, nil
}

// intakeBinaryJetStream publishes intakeBinaryRequests requests to the
// running intake's request stream, spread over principals, and measures from
// the first publish until etl_job_records holds that many more rows of
// those principals (scopes are their principal_scope_hash values).
func (h *harness) intakeBinaryJetStream(ctx context.Context, s events.Subjects, principals, scopes []string) (Result, error) {
	n := intakeBinaryRequests(h.o.Quick)
	res := Result{System: "mightyetl", Scenario: "intake-binary", Variant: "jetstream", Metrics: map[string]float64{},
		Settings: map[string]string{
			"requests":  strconv.Itoa(n),
			"subjects":  fmt.Sprintf("%s.requests.<principal>, %d principals, stream %s", s.Prefix(), len(principals), s.RequestsStream()),
			"publisher": "1 connection, PublishMsgAsync (client default max pending), distinct Nats-Msg-Id, all PubAcks awaited",
			"consumer":  "the binary's request consumer, product defaults",
			"measured":  "first publish until etl_job_records grew by requests (polled every 20ms)",
			"body":      "1 ETL record",
		}}
	nc, err := nats.Connect(h.o.NATSURL, nats.Name("mightyetl-bench"))
	if err != nil {
		return res, fmt.Errorf("connect NATS: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return res, err
	}
	if err := waitForRequestConsumer(ctx, js, s); err != nil {
		return res, err
	}
	const countJS = `SELECT count(*) FROM etl_job_records WHERE principal_scope_hash = ANY(ARRAY(SELECT decode(h, 'hex') FROM unnest($1::text[]) h))`
	before, err := h.count(ctx, countJS, scopes)
	if err != nil {
		return res, err
	}
	start := time.Now()
	if err := publishRequests(ctx, js, s, principals, n); err != nil {
		return res, err
	}
	published := time.Since(start)
	var stored int64
	err = waitUntil(ctx, 3*time.Minute, 20*time.Millisecond, "the intake to store every JetStream request", func() (bool, error) {
		c, err := h.count(ctx, countJS, scopes)
		stored = c - before
		return stored >= int64(n), err
	})
	elapsed := time.Since(start)
	res.Metrics["requests"] = float64(n)
	res.Metrics["stored"] = float64(stored)
	res.Metrics["publish_s"] = published.Seconds()
	res.Metrics["published_per_s"] = float64(n) / published.Seconds()
	if err != nil {
		return res, err
	}
	res.Metrics["elapsed_s"] = elapsed.Seconds()
	res.Metrics["jobs_per_s"] = float64(n) / elapsed.Seconds()
	return res, nil
}

// waitForRequestConsumer waits until the intake has created the request
// stream and its durable consumer, so the timed window does not include
// the binary's NATS setup.
func waitForRequestConsumer(ctx context.Context, js jetstream.JetStream, s events.Subjects) error {
	return waitUntil(ctx, 30*time.Second, 50*time.Millisecond, "stream "+s.RequestsStream()+" and its consumer", func() (bool, error) {
		if _, err := js.Stream(ctx, s.RequestsStream()); err != nil {
			return false, nil
		}
		_, err := js.Consumer(ctx, s.RequestsStream(), intakeDurable)
		return err == nil, nil
	})
}

// publishRequests publishes n requests round-robin over the principals'
// subjects with PublishMsgAsync, each with its own Nats-Msg-Id (the
// idempotency key), and waits for every PubAck. A failed, missing or
// duplicate PubAck is an error: the run would not store n jobs.
func publishRequests(ctx context.Context, js jetstream.JetStream, s events.Subjects, principals []string, n int) error {
	subjects := make([]string, len(principals))
	for i, p := range principals {
		var err error
		if subjects[i], err = s.Requests(p); err != nil {
			return err
		}
	}
	body := []byte(intakeBody)
	futures := make([]jetstream.PubAckFuture, 0, n)
	for i := range n {
		msg := nats.NewMsg(subjects[i%len(subjects)])
		msg.Header.Set(events.IdempotencyKeyHeader, "bench-js-"+uuid.NewString())
		msg.Data = body
		f, err := publishAsync(ctx, js, msg)
		if err != nil {
			return fmt.Errorf("publish request %d: %w", i, err)
		}
		futures = append(futures, f)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		return fmt.Errorf("%d PubAcks outstanding after a minute", js.PublishAsyncPending())
	case <-ctx.Done():
		return ctx.Err()
	}
	var failed, dup int
	var firstErr error
	for _, f := range futures {
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				dup++
			}
		case err := <-f.Err():
			failed++
			if firstErr == nil {
				firstErr = err
			}
		default: // not resolved although the publisher is complete
			failed++
		}
	}
	if failed > 0 || dup > 0 {
		return fmt.Errorf("%d of %d requests not acknowledged, %d duplicates (first error: %v)", failed, n, dup, firstErr)
	}
	return nil
}

// publishAsync is PublishMsgAsync that waits out a full client window
// (ErrTooManyStalledMsgs) instead of failing.
func publishAsync(ctx context.Context, js jetstream.JetStream, msg *nats.Msg) (jetstream.PubAckFuture, error) {
	for {
		f, err := js.PublishMsgAsync(msg)
		if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			return f, err
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(time.Second):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// pgbench output lines (PostgreSQL 14 and later; older versions print
// "excluding connections establishing" instead).
var (
	pgbenchTPS       = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \((?:without initial connection time|excluding connections establishing)\)`)
	pgbenchAnyTPS    = regexp.MustCompile(`(?m)^tps = ([0-9.]+)`)
	pgbenchLatency   = regexp.MustCompile(`(?m)^latency average = ([0-9.]+) ms`)
	pgbenchProcessed = regexp.MustCompile(`(?m)^number of transactions actually processed: ([0-9]+)`)
	pgbenchFailed    = regexp.MustCompile(`(?m)^number of failed transactions: ([0-9]+)`)
)

// pgbenchInsert is the floor the intake is compared with: pgbench's
// intakeConcurrency clients each running one single-row INSERT per
// transaction (autocommit) into a scratch table of the bench database for
// dur. Without pgbench on PATH it notes that and measures nothing.
func (h *harness) pgbenchInsert(ctx context.Context, dur time.Duration) (Result, error) {
	secs := max(1, int(dur.Round(time.Second).Seconds()))
	res := Result{System: "pgbench", Scenario: "intake-binary", Variant: "insert-autocommit", Metrics: map[string]float64{},
		Settings: map[string]string{
			"command": fmt.Sprintf("pgbench -n -c %d -j 2 -T %d -f <script> <bench database>", intakeConcurrency, secs),
			"script":  "INSERT INTO " + pgbenchTable + " (payload) VALUES ('<1 ETL record body>'): one row, autocommit",
			"table":   pgbenchTable + " (id bigserial primary key, payload text not null, created_at timestamptz not null default clock_timestamp())",
			"server":  "the same PostgreSQL, intake binary stopped, bench database re-created (no intake tables left to vacuum)",
		}}
	bin, err := exec.LookPath("pgbench")
	if err != nil {
		res.Notes = append(res.Notes, "pgbench not on PATH: baseline skipped")
		return res, nil
	}
	if _, err := h.pool.Exec(ctx, `DROP TABLE IF EXISTS `+pgbenchTable+`;
CREATE TABLE `+pgbenchTable+` (id bigserial PRIMARY KEY, payload text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp())`); err != nil {
		return res, fmt.Errorf("create pgbench table: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, _ = h.pool.Exec(dctx, `DROP TABLE IF EXISTS `+pgbenchTable)
	}()
	script, err := writePgbenchScript()
	if err != nil {
		return res, err
	}
	defer os.Remove(script)
	cmd := exec.CommandContext(ctx, bin, "-n", "-c", strconv.Itoa(intakeConcurrency), "-j", "2",
		"-T", strconv.Itoa(secs), "-f", script, h.url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return res, fmt.Errorf("pgbench: %v: %s", err, lastLinesOf(out, 10))
	}
	if err := parsePgbench(out, res.Metrics); err != nil {
		return res, err
	}
	rows, err := h.count(ctx, `SELECT count(*) FROM `+pgbenchTable)
	if err != nil {
		return res, err
	}
	res.Metrics["rows"] = float64(rows)
	return res, nil
}

// writePgbenchScript writes the one-statement pgbench script to a temporary
// file and returns its path.
func writePgbenchScript() (string, error) {
	f, err := os.CreateTemp("", "mightyetl-bench-pgbench-*.sql")
	if err != nil {
		return "", err
	}
	sql := "INSERT INTO " + pgbenchTable + " (payload) VALUES ('" + strings.ReplaceAll(intakeBody, "'", "''") + "');\n"
	if _, err := f.WriteString(sql); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// parsePgbench reads tps (without initial connection time when printed),
// the average latency and the transaction counts from pgbench's output.
func parsePgbench(out []byte, into map[string]float64) error {
	m := pgbenchTPS.FindSubmatch(out)
	if m == nil {
		m = pgbenchAnyTPS.FindSubmatch(out)
	}
	if m == nil {
		return fmt.Errorf("pgbench printed no tps line: %s", lastLinesOf(out, 10))
	}
	for _, f := range []struct {
		key string
		m   [][]byte
	}{
		{"tps", m},
		{"latency_avg_ms", pgbenchLatency.FindSubmatch(out)},
		{"transactions", pgbenchProcessed.FindSubmatch(out)},
		{"failed_transactions", pgbenchFailed.FindSubmatch(out)},
	} {
		if f.m == nil {
			continue
		}
		v, err := strconv.ParseFloat(string(f.m[1]), 64)
		if err != nil {
			return fmt.Errorf("pgbench %s: %w", f.key, err)
		}
		into[f.key] = v
	}
	return nil
}

// lastLinesOf is the last n lines of out, for error messages.
func lastLinesOf(out []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// randomHex is n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
