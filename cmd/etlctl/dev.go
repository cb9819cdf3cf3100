package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/mightyetl/mightyetl/internal/app"
	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/config"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/tracing"
)

// devPrincipal is the principal of the generated development credential.
const devPrincipal = "dev"

// runDev runs the whole system in one process: it creates and migrates the
// database, starts an embedded NATS server with JetStream when NATS_URL is
// not set, and runs the HTTP intake (basic auth with a fresh credential,
// diagnostic jobs on), the outbox relay, the NATS request consumer and a
// worker. It honours the same environment settings as the separate binaries.
func runDev(args []string) int {
	if len(args) > 0 {
		fmt.Fprintln(os.Stderr, "etlctl dev takes no arguments; configure it with the same environment variables as intake and worker")
		return 2
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("component", "dev")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	// Tracing is on only when an OTLP endpoint is set (OTEL_* variables).
	tcfg, shutdownTracing, err := tracing.Setup(ctx, "mightyetl-dev")
	if err != nil {
		fmt.Fprintf(os.Stderr, "etlctl dev: invalid configuration: %v\n", err)
		return 2
	}
	defer func() { _ = shutdownTracing(context.WithoutCancel(ctx)) }() // best-effort flush at exit
	if tcfg.Enabled {
		log.Info("tracing on", "protocol", tcfg.Protocol)
	}

	dir, err := os.MkdirTemp("", "mightyetl-dev-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "etlctl dev: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)

	// Development defaults, each overridable by the environment.
	password := randomHex(12)
	defaults := map[string]string{
		"MIGHTYETL_AUTH_MODE":               "basic",
		"MIGHTYETL_BASIC_CREDENTIALS_FILE":  filepath.Join(dir, "credentials"),
		"MIGHTYETL_PRINCIPAL_HASH_KEY":      randomHex(32),
		"MIGHTYETL_DIAGNOSTIC_JOBS_ENABLED": "true",
		"MIGHTYETL_NATS_REQUESTS_ENABLED":   "true",
	}
	if os.Getenv("MIGHTYETL_BASIC_CREDENTIALS_FILE") == "" {
		// The printed dev credential opens the operator console too.
		defaults["MIGHTYETL_OPERATOR_PRINCIPALS"] = devPrincipal
	}
	getenv := func(k string) string {
		if v := os.Getenv(k); v != "" {
			return v
		}
		return defaults[k]
	}
	if os.Getenv("MIGHTYETL_BASIC_CREDENTIALS_FILE") == "" {
		line, err := auth.CredentialLine(devPrincipal, []byte(password))
		if err == nil {
			err = os.WriteFile(defaults["MIGHTYETL_BASIC_CREDENTIALS_FILE"], []byte(line+"\n"), 0o600)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "etlctl dev: write dev credential: %v\n", err)
			return 1
		}
	}

	// An embedded NATS server with JetStream when none is configured. It
	// listens on the loopback interface only and has no users and no TLS:
	// any local process may publish job requests as any principal. The
	// start-up output says so.
	if os.Getenv("NATS_URL") == "" {
		ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
			StoreDir: filepath.Join(dir, "nats"), NoSigs: true, NoLog: true})
		if err != nil {
			fmt.Fprintf(os.Stderr, "etlctl dev: embedded NATS: %v\n", err)
			return 1
		}
		go ns.Start()
		if !ns.ReadyForConnections(10 * time.Second) {
			fmt.Fprintln(os.Stderr, "etlctl dev: embedded NATS did not start")
			return 1
		}
		defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
		defaults["NATS_URL"] = ns.ClientURL()
		log.Warn("embedded NATS server started: loopback only, unauthenticated, temporary storage")
		fmt.Println("embedded NATS " + ns.ClientURL() + " (loopback only) is UNAUTHENTICATED: no users, no TLS, any local process may publish job requests as any principal; set NATS_URL to use a secured server")
	}

	icfg, _, err := config.LoadIntake(nil, getenv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etlctl dev: invalid configuration: %v\n", err)
		return 2
	}
	wcfg, wloader, err := config.LoadWorker(nil, getenv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etlctl dev: invalid configuration: %v\n", err)
		return 2
	}
	authn, err := icfg.Authenticator()
	if err != nil {
		fmt.Fprintf(os.Stderr, "etlctl dev: invalid configuration: MIGHTYETL_AUTH_MODE: %v\n", err)
		return 2
	}

	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := pg.EnsureDatabase(startCtx, icfg.DatabaseURL, log); err != nil {
		fmt.Fprintf(os.Stderr, "etlctl dev: database %s: %s\n", pg.RedactURL(icfg.DatabaseURL), icfg.RedactError(err))
		return 1
	}
	pools, err := app.OpenIntakePools(startCtx, icfg, "mightyetl-dev")
	if err != nil {
		fmt.Fprintf(os.Stderr, "etlctl dev: database %s: %s\n", pg.RedactURL(icfg.DatabaseURL), icfg.RedactError(err))
		return 1
	}
	defer pools.Close()
	if err := pg.Migrate(startCtx, pools.Requests); err != nil {
		fmt.Fprintf(os.Stderr, "etlctl dev: %v\n", err)
		return 1
	}

	in, err := app.NewIntake(icfg, pools, app.IntakeOptions{Authenticator: authn, Logger: log, Registry: app.NewRegistry(), Name: "mightyetl-dev"})
	if err != nil {
		fmt.Fprintf(os.Stderr, "etlctl dev: %v\n", err)
		return 2
	}
	var stoppers []func(context.Context) error
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), wcfg.ShutdownGrace+10*time.Second)
		defer cancel()
		for i := len(stoppers) - 1; i >= 0; i-- {
			_ = stoppers[i](stopCtx)
		}
	}()
	wp, err := app.NewWorkerProcess(startCtx, wcfg, wloader.Provenance(), true, log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etlctl dev: worker: %s\n", wcfg.RedactError(err))
		return 1
	}
	if err := wp.Start(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "etlctl dev: worker: %s\n", wcfg.RedactError(err))
		return 1
	}
	stoppers = append(stoppers, wp.Stop)
	// The intake starts last and stops first: its bridge runs until ctx
	// ends (SIGINT/SIGTERM) or Stop.
	if err := in.Start(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "etlctl dev: %v\n", err)
		return 1
	}
	stoppers = append(stoppers, in.Stop)

	base := "http://" + in.Server.Addr()
	fmt.Println("mightyETL dev is running: intake " + base + ", worker metrics http://" + wp.MetricsAddr() + "/metrics")
	if icfg.AuthMode == auth.ModeBasic && os.Getenv("MIGHTYETL_BASIC_CREDENTIALS_FILE") == "" {
		fmt.Printf("dev credential (printed once): %s / %s\n", devPrincipal, password)
		if icfg.ConsoleEnabled {
			fmt.Printf("operator console: %s/console/ (sign in with the dev credential)\n", base)
		}
		fmt.Println("submit a sample job:")
		fmt.Printf("curl -sS -i -u %s:%s -H 'Idempotency-Key: dev-sample-%s' -H 'Content-Type: application/json' --data '[{\"id\":\"a1\",\"name\":\"jane\",\"email\":\"Jane@Example.COM\",\"amount\":\"999.9\"}]' %s/api/etl/jobs\n",
			devPrincipal, password, randomHex(8), base)
		// The same with the CLI (`etlctl jobs`), from the repository root
		// in another shell; the README shows these lines.
		fmt.Println("or with the CLI (make build puts it in bin/), in another shell:")
		fmt.Printf("export MIGHTYETL_API_URL=%s MIGHTYETL_API_USER=%s MIGHTYETL_API_PASSWORD=%s\n", base, devPrincipal, password)
		fmt.Println(`echo '[{"id":"a1","name":"jane","email":"Jane@Example.COM","amount":"999.9"}]' | bin/etlctl jobs submit`)
		fmt.Println("bin/etlctl jobs wait <JOB ID printed by submit>")
	}
	<-ctx.Done()
	log.Info("shutdown requested; draining")
	return 0
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
