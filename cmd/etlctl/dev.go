package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
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

// devPrincipal is the principal of the dev credential.
const devPrincipal = "dev"

// devShutdownGrace is dev's MIGHTYETL_SHUTDOWN_GRACE_PERIOD: how long
// running jobs get to finish after Ctrl-C, shorter than the binaries'
// default (config.DefaultShutdownGrace) because someone waits at the
// terminal.
const devShutdownGrace = 10 * time.Second

// devReleaseWait bounds the wait for the worker to release its claims
// after the second Ctrl-C (the releases are single fenced updates); past
// it dev exits and the leases expire on their own.
const devReleaseWait = 30 * time.Second

const devUsage = `usage: etlctl dev [--http-addr ADDR] [--metrics-addr ADDR] [--reset-identity]

Runs the whole system in one process. It reads the same MIGHTYETL_*,
DATABASE_URL and NATS_* variables as intake and worker; a flag wins over
its variable.

  --http-addr ADDR     the intake's HTTP address (MIGHTYETL_HTTP_ADDR, default 127.0.0.1:8080)
  --metrics-addr ADDR  the worker's metrics and health address (MIGHTYETL_METRICS_ADDR, default 127.0.0.1:9091)
  --reset-identity     replace the kept principal hash key and dev password with new ones
                       (jobs of earlier runs stay in the database but are no longer visible)

The identity lives in $MIGHTYETL_DEV_STATE_DIR/dev.json, else in
mightyetl/dev.json under the user's configuration directory (~/.config on Linux).
Ctrl-C drains: running jobs get MIGHTYETL_SHUTDOWN_GRACE_PERIOD (10s in dev) to
finish, then go back to PENDING; a second Ctrl-C releases them at once.`

// runDev runs the whole system in one process: it binds the HTTP and
// metrics ports (a taken one fails before anything starts), creates and
// migrates the database, starts an embedded NATS server with JetStream when
// NATS_URL is not set, and runs the HTTP intake (basic auth with the dev
// credential, diagnostic jobs on), the outbox relay, the NATS request
// consumer and a worker. The principal hash key and the dev password are
// kept across restarts (devIdentity). The first SIGINT or SIGTERM drains:
// running jobs get the shutdown grace (devShutdownGrace unless set) with a
// countdown; a second one releases them at once.
func runDev(args []string) int {
	fs := flag.NewFlagSet("etlctl dev", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.String("http-addr", "", "")
	fs.String("metrics-addr", "", "")
	reset := fs.Bool("reset-identity", false, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Println(devUsage)
			return 0
		}
		fmt.Fprintf(os.Stderr, "etlctl dev: %v\n%s\n", err, devUsage)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "etlctl dev: unexpected argument %q\n%s\n", fs.Arg(0), devUsage)
		return 2
	}
	// Each address flag goes to the loader that owns it, so that it wins
	// over the variable and provenance says "flag".
	var intakeArgs, workerArgs []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "http-addr":
			intakeArgs = append(intakeArgs, "--http-addr", f.Value.String())
		case "metrics-addr":
			workerArgs = append(workerArgs, "--metrics-addr", f.Value.String())
		}
	})

	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("component", "dev")
	sig := watchSignals()
	defer sig.stop()
	ctx := sig.first

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

	// Development values, each overridden by its variable (or flag):
	// provenance reports them with source "dev".
	chosen := map[string]string{
		"MIGHTYETL_AUTH_MODE":               "basic",
		"MIGHTYETL_DIAGNOSTIC_JOBS_ENABLED": "true",
		"MIGHTYETL_NATS_REQUESTS_ENABLED":   "true",
		"MIGHTYETL_SHUTDOWN_GRACE_PERIOD":   devShutdownGrace.String(),
	}
	ownCredential := os.Getenv("MIGHTYETL_BASIC_CREDENTIALS_FILE") == ""
	ownKey := os.Getenv("MIGHTYETL_PRINCIPAL_HASH_KEY") == "" && os.Getenv("MIGHTYETL_PRINCIPAL_HASH_KEY_FILE") == ""
	if ownCredential {
		chosen["MIGHTYETL_BASIC_CREDENTIALS_FILE"] = filepath.Join(dir, "credentials")
		// The dev credential opens the operator console too.
		chosen["MIGHTYETL_OPERATOR_PRINCIPALS"] = devPrincipal
	}
	var id devIdentity
	var idPath, idNote string
	var idNew bool
	if ownCredential || ownKey {
		id, idPath, idNew, idNote, err = devIdentityFor(*reset)
		if err != nil {
			fmt.Fprintf(os.Stderr, "etlctl dev: %v\n", err)
			return 1
		}
		if ownKey {
			chosen["MIGHTYETL_PRINCIPAL_HASH_KEY"] = id.PrincipalHashKey
		}
	}
	embedNATS := os.Getenv("NATS_URL") == ""
	if embedNATS {
		// Replaced by the embedded server's address once it runs; until
		// then only the other settings are checked.
		chosen["NATS_URL"] = "nats://127.0.0.1:4222"
	}
	load := func() (config.Intake, config.Worker, *config.Loader, *config.Loader, bool) {
		icfg, il, err := config.LoadIntakeDev(intakeArgs, os.Getenv, chosen)
		if err == nil {
			var wcfg config.Worker
			var wl *config.Loader
			if wcfg, wl, err = config.LoadWorkerDev(workerArgs, os.Getenv, chosen); err == nil {
				return icfg, wcfg, il, wl, true
			}
		}
		fmt.Fprintf(os.Stderr, "etlctl dev: invalid configuration: %v\n", err)
		return config.Intake{}, config.Worker{}, nil, nil, false
	}
	icfg, wcfg, _, _, ok := load()
	if !ok {
		return 2
	}

	// The ports before anything starts: a second dev, or anything else on
	// them, fails here with one line naming the setting.
	httpListener, err := app.ListenHTTP(ctx, icfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etlctl dev: %v\n", err)
		return 1
	}
	defer httpListener.Close() // the intake's once handed over; closing twice is harmless
	metricsListener, err := app.ListenMetrics(ctx, wcfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etlctl dev: %v\n", err)
		return 1
	}
	defer metricsListener.Close()

	if idNew && idPath != "" {
		if err := saveDevIdentity(idPath, id); err != nil {
			fmt.Fprintf(os.Stderr, "etlctl dev: %v\n", err)
			return 1
		}
	}
	if ownCredential {
		line, err := auth.CredentialLine(devPrincipal, []byte(id.Password))
		if err == nil {
			err = os.WriteFile(chosen["MIGHTYETL_BASIC_CREDENTIALS_FILE"], []byte(line+"\n"), 0o600)
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
	if embedNATS {
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
		chosen["NATS_URL"] = ns.ClientURL()
		log.Warn("embedded NATS server started: loopback only, unauthenticated, temporary storage")
		fmt.Println("embedded NATS " + ns.ClientURL() + " (loopback only) is UNAUTHENTICATED: no users, no TLS, any local process may publish job requests as any principal; set NATS_URL to use a secured server")
	}
	icfg, wcfg, iloader, wloader, ok := load()
	if !ok {
		return 2
	}
	app.LogConfiguration(log, "intake configuration", iloader.Provenance())
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

	in, err := app.NewIntake(icfg, pools, app.IntakeOptions{Authenticator: authn, Logger: log, Registry: app.NewRegistry(),
		Name: "mightyetl-dev", Listener: httpListener})
	if err != nil {
		fmt.Fprintf(os.Stderr, "etlctl dev: %v\n", err)
		return 2
	}
	wp, err := app.NewWorkerProcess(startCtx, wcfg, wloader.Provenance(), metricsListener, log)
	if err != nil {
		_ = in.Stop(context.Background()) // never started: closes its listener
		fmt.Fprintf(os.Stderr, "etlctl dev: worker: %s\n", wcfg.RedactError(err))
		return 1
	}
	if err := wp.Start(ctx); err != nil {
		_ = in.Stop(context.Background())
		fmt.Fprintf(os.Stderr, "etlctl dev: worker: %s\n", wcfg.RedactError(err))
		return 1
	}
	// The intake starts last and stops first: its bridge runs until ctx
	// ends (SIGINT/SIGTERM) or Stop.
	if err := in.Start(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "etlctl dev: %v\n", err)
		drainDev(nil, wp, wcfg.ShutdownGrace, sig.second, log)
		return 1
	}

	base := "http://" + in.Server.Addr()
	fmt.Println("mightyETL dev is running: intake " + base + ", worker metrics http://" + wp.MetricsAddr() + "/metrics")
	if idNote != "" {
		fmt.Println(idNote)
	}
	fmt.Printf("on Ctrl-C, running jobs get %s to finish (%s), then go back to PENDING; a second Ctrl-C releases them at once\n",
		wcfg.ShutdownGrace, graceOrigin(wloader.Provenance()))
	if icfg.AuthMode == auth.ModeBasic && ownCredential {
		fmt.Printf("dev credential: %s / %s\n", devPrincipal, id.Password)
		if icfg.ConsoleEnabled {
			fmt.Printf("operator console: %s/console/ (sign in with the dev credential)\n", base)
		}
		fmt.Println("submit a sample job:")
		fmt.Printf("curl -sS -i -u %s:%s -H 'Idempotency-Key: dev-sample-%s' -H 'Content-Type: application/json' --data '[{\"id\":\"a1\",\"name\":\"jane\",\"email\":\"Jane@Example.COM\",\"amount\":\"999.9\"}]' %s/api/etl/jobs\n",
			devPrincipal, id.Password, randomHex(8), base)
		// The same with the CLI (`etlctl jobs`), from the repository root
		// in another shell; the README shows these lines.
		fmt.Println("or with the CLI (make build puts it in bin/), in another shell:")
		fmt.Printf("export MIGHTYETL_API_URL=%s MIGHTYETL_API_USER=%s MIGHTYETL_API_PASSWORD=%s\n", base, devPrincipal, id.Password)
		fmt.Println(`echo '[{"id":"a1","name":"jane","email":"Jane@Example.COM","amount":"999.9"}]' | bin/etlctl jobs submit`)
		fmt.Println("bin/etlctl jobs wait <JOB ID printed by submit>")
	}
	<-ctx.Done()
	log.Info("shutdown requested; draining")
	// The intake first (its HTTP requests drain within its own grace), so
	// no new job arrives, then the worker.
	ictx, cancelIntake := context.WithTimeout(sig.releaseContext(), icfg.ShutdownGrace)
	_ = in.Stop(ictx)
	cancelIntake()
	drainDev(os.Stdout, wp, wcfg.ShutdownGrace, sig.second, log)
	return 0
}

// devIdentityFor returns the identity dev runs with: the kept one, or a
// new one when there is none or reset asks for it (then fresh is true and
// the caller saves it at path once the ports are bound). path is empty when
// there is no place to keep it (no $HOME): the identity lasts one run. note
// is the start-up line that says where it lives and how to reset it.
func devIdentityFor(reset bool) (id devIdentity, path string, fresh bool, note string, err error) {
	path, perr := devIdentityPath(os.Getenv)
	if perr != nil {
		return newDevIdentity(), "", true, "dev identity: this run only: " + perr.Error() + " to keep it across restarts", nil
	}
	if !reset {
		kept, ok, err := loadDevIdentity(path)
		if err != nil {
			return devIdentity{}, "", false, "", err
		}
		if ok {
			return kept, path, false, "dev identity (principal hash key and dev password) kept in " + path +
				": jobs of earlier runs stay visible; `etlctl dev --reset-identity` or deleting the file starts afresh", nil
		}
	}
	what := "created"
	if reset {
		what = "reset (jobs of earlier runs stay in the database but are no longer visible to the dev credential); new one"
	}
	return newDevIdentity(), path, true, "dev identity (principal hash key and dev password) " + what + " in " + path +
		", kept across restarts; `etlctl dev --reset-identity` or deleting the file starts afresh", nil
}

// graceOrigin says where the shutdown grace came from, for the start-up
// line.
func graceOrigin(provenance []config.Setting) string {
	for _, s := range provenance {
		if s.Name == "MIGHTYETL_SHUTDOWN_GRACE_PERIOD" && s.Source == config.SourceDev {
			return fmt.Sprintf("dev's MIGHTYETL_SHUTDOWN_GRACE_PERIOD; intake and worker default to %s", config.DefaultShutdownGrace)
		}
	}
	return "MIGHTYETL_SHUTDOWN_GRACE_PERIOD"
}

// devSignals turns SIGINT and SIGTERM into two steps: the first ends
// first (start-up stops, or the drain begins), the second closes second
// (running jobs are released at once).
type devSignals struct {
	first  context.Context
	second <-chan struct{}
	stop   func()
}

// watchSignals starts watching; stop ends the watch and restores the
// default handling.
func watchSignals() devSignals {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	first, cancel := context.WithCancel(context.Background())
	second := make(chan struct{})
	done := make(chan struct{})
	go func() {
		select {
		case <-ch:
		case <-done:
			return
		}
		cancel()
		select {
		case <-ch:
			close(second)
		case <-done:
		}
	}()
	return devSignals{first: first, second: second, stop: func() {
		signal.Stop(ch)
		close(done)
		cancel()
	}}
}

// releaseContext is a context that ends at the second signal.
func (s devSignals) releaseContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-s.second
		cancel()
	}()
	return ctx
}

// drainDev stops the worker process: running jobs get grace to finish (the
// worker's own ShutdownGrace, which then cancels and releases them, fenced
// and with the attempt not charged), cut short when second closes. While
// jobs run it prints to out (nil: nothing) how many, and when they will be
// released. It returns once the worker stopped, or devReleaseWait after the
// release began.
func drainDev(out io.Writer, wp *app.WorkerProcess, grace time.Duration, second <-chan struct{}, log *slog.Logger) {
	stopCtx, release := context.WithCancel(context.Background())
	defer release()
	deadline := time.Now().Add(grace)
	stopped := make(chan error, 1)
	go func() { stopped <- wp.Stop(stopCtx) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := -1
	for {
		n := wp.Worker.Running()
		left := time.Until(deadline).Round(time.Second)
		// Every five seconds, every second of the last five, and whenever
		// the count changes.
		if out != nil && n > 0 && left > 0 && (n != last || left%(5*time.Second) == 0 || left <= 5*time.Second) {
			fmt.Fprintf(out, "draining: %s running, releasing %s in %s; press Ctrl-C again to release %s now\n",
				plural(n, "job"), them(n), left, them(n))
		}
		last = n
		select {
		case err := <-stopped:
			if err != nil {
				log.Error("worker stop", "error_class", "shutdown")
			}
			if out != nil && last > 0 {
				fmt.Fprintf(out, "released %s: PENDING again, the next start runs %s\n", plural(last, "job"), them(last))
			}
			return
		case <-second:
			if out != nil {
				fmt.Fprintf(out, "releasing %s now: PENDING again, the next start runs %s\n", plural(last, "running job"), them(last))
			}
			release() // the worker cancels its handlers and releases their claims
			second = nil
			select {
			case <-stopped: // the first Stop returns at once: its ctx ended
			case <-time.After(devReleaseWait):
			}
			waitCtx, cancel := context.WithTimeout(context.Background(), devReleaseWait)
			defer cancel()
			if err := wp.Stop(waitCtx); err != nil {
				log.Error("worker stop", "error_class", "release_timeout")
			}
			return
		case <-tick.C:
		}
	}
}

// plural is "1 job" or "n jobs".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// them is "it" for one, "them" for more.
func them(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
