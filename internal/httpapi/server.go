package httpapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/console"
	"github.com/mightyetl/mightyetl/internal/health"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/startstop"
	"github.com/mightyetl/mightyetl/internal/tracing"
	"github.com/mightyetl/mightyetl/internal/worker"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultAddr is Options.Addr's default, the listen address
// (MIGHTYETL_HTTP_ADDR). The other defaults of Options are the constants of
// the parts they bound: intake.DefaultMaxPayloadBytes,
// DefaultMaxInFlightBytes, DefaultProcessConcurrency and
// worker.DefaultPollInterval.
const DefaultAddr = "127.0.0.1:8080"

// Options configure the HTTP API. Zero values take the defaults noted.
type Options struct {
	// Addr is the listen address of Server.Start (MIGHTYETL_HTTP_ADDR);
	// empty means DefaultAddr, port 0 picks a free port (see Server.Addr).
	Addr string
	// Service runs the use cases. Required.
	Service *intake.Service
	// Authenticator decides the principal; nil means auth.NewDeny().
	Authenticator auth.Authenticator
	// Pool backs /readyz (ping and schema version). Give it a small
	// pool of its own, never the request pool, so readiness is answered
	// while requests hold every request connection. Nil makes /readyz
	// answer 503.
	Pool *pgxpool.Pool
	// Metrics receives request durations; nil records nothing. Pass the same
	// value as the Service's metrics.
	Metrics *metrics.Intake
	// Gatherer serves /metrics; nil serves an empty registry.
	Gatherer prometheus.Gatherer
	// Logger receives one JSON line per failed request (route template,
	// status, duration, error code) and debug lines for the rest; nil
	// discards.
	Logger *slog.Logger
	// MaxPayloadBytes bounds a request body (1 byte..intake.MaxPayloadBytesCeiling,
	// MIGHTYETL_MAX_PAYLOAD_BYTES); zero means intake.DefaultMaxPayloadBytes.
	MaxPayloadBytes int64
	// MaxInFlightBytes bounds the request body bytes held at once across
	// all requests (MIGHTYETL_INTAKE_MAX_INFLIGHT_BYTES); a body that does
	// not fit is 503 etl_server_busy with Retry-After. Bytes are counted as
	// they arrive, never by declared length, and held until the handler
	// returns. Zero means max(DefaultMaxInFlightBytes, MaxPayloadBytes); it
	// must be at least
	// MaxPayloadBytes.
	MaxInFlightBytes int64
	// ProcessConcurrency bounds the POST /api/etl/process requests that run
	// their transaction at once; the others wait (until their request
	// ends) without holding a database connection. Keep it below the
	// request pool's size so status, list and cancel always find a
	// connection. Zero means DefaultProcessConcurrency.
	ProcessConcurrency int
	// PollInterval is the worker poll interval (MIGHTYETL_WORKER_POLL_INTERVAL);
	// Retry-After is its ceiling in seconds, at least 1. Zero means
	// worker.DefaultPollInterval.
	PollInterval time.Duration
	// DiagnosticJobsEnabled serves POST /api/etl/diagnostic-jobs
	// (MIGHTYETL_DIAGNOSTIC_JOBS_ENABLED); otherwise it is 404.
	DiagnosticJobsEnabled bool
	// Console, when not nil, serves the operator console under /console/
	// and its JSON under /api/ops/ (MIGHTYETL_CONSOLE_ENABLED); nil makes
	// both 404.
	Console *console.Console
	// Operators decides who may use the console; nil names nobody.
	Operators *auth.Operators
	// PrincipalHashKey keys the operator's principal scope hash (the same
	// MIGHTYETL_PRINCIPAL_HASH_KEY as the Service's).
	PrincipalHashKey []byte
	// SchemaGate, when not nil, refuses every POST that creates or changes
	// a job (submit, diagnostic jobs, cancellation, replays, process, the
	// operator's replay) with 503 etl_schema_incompatible and Retry-After
	// while it reports the schema incompatible; GETs are served. Nil
	// refuses nothing.
	SchemaGate SchemaGate
}

// WithDefaults returns o with every zero field that has a default set to
// it: DefaultAddr, auth.NewDeny(), an empty registry, a discarding logger,
// intake.DefaultMaxPayloadBytes, max(DefaultMaxInFlightBytes, MaxPayloadBytes),
// DefaultProcessConcurrency and worker.DefaultPollInterval (a non-positive
// concurrency or poll interval counts as zero).
func (o Options) WithDefaults() Options {
	o.Addr = cmp.Or(o.Addr, DefaultAddr)
	if o.Authenticator == nil {
		o.Authenticator = auth.NewDeny()
	}
	if o.Gatherer == nil {
		o.Gatherer = prometheus.NewRegistry()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.MaxPayloadBytes = cmp.Or(o.MaxPayloadBytes, intake.DefaultMaxPayloadBytes) // validate refuses a negative one
	if o.MaxInFlightBytes == 0 {
		o.MaxInFlightBytes = max(DefaultMaxInFlightBytes, o.MaxPayloadBytes)
	}
	o.ProcessConcurrency = cmp.Or(max(o.ProcessConcurrency, 0), DefaultProcessConcurrency)
	o.PollInterval = cmp.Or(max(o.PollInterval, 0), worker.DefaultPollInterval)
	return o
}

// validate checks o after WithDefaults.
func (o Options) validate() error {
	if o.Service == nil {
		return errors.New("httpapi: no intake service")
	}
	if o.MaxPayloadBytes < 1 || o.MaxPayloadBytes > intake.MaxPayloadBytesCeiling {
		return fmt.Errorf("httpapi: max payload bytes %d outside 1..%d", o.MaxPayloadBytes, intake.MaxPayloadBytesCeiling)
	}
	if o.MaxInFlightBytes < o.MaxPayloadBytes {
		return fmt.Errorf("httpapi: max in-flight bytes %d below the payload limit %d", o.MaxInFlightBytes, o.MaxPayloadBytes)
	}
	return nil
}

// api holds what the handlers share.
type api struct {
	opts         Options
	retryAfter   string
	budget       *byteBudget   // request body bytes in flight
	processSlots chan struct{} // one token per running /process transaction
}

// NewHandler returns the routed, instrumented handler of every route. It is
// safe for concurrent use.
func NewHandler(opts Options) (http.Handler, error) {
	opts = opts.WithDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	a := &api{
		opts:         opts,
		retryAfter:   fmt.Sprint(max(1, int64(math.Ceil(opts.PollInterval.Seconds())))),
		budget:       &byteBudget{max: opts.MaxInFlightBytes},
		processSlots: make(chan struct{}, opts.ProcessConcurrency),
	}
	mux := http.NewServeMux()
	route := func(pattern string, h apiHandler) { mux.Handle(pattern, a.authenticated(h)) }
	allow := func(path, methods string) {
		route(path, func(w http.ResponseWriter, r *http.Request, _ string) {
			w.Header().Set("Allow", methods)
			writeProblem(w, r, codes.MethodNotAllowed)
		})
	}
	// post registers a POST route: a body it carries must be JSON.
	// While the schema is incompatible it answers 503 etl_schema_incompatible.
	post := func(pattern string, h apiHandler) { route(pattern, gateSchema(opts.SchemaGate, requireJSON(h))) }
	post("POST /api/etl/jobs", a.submit(""))
	route("GET /api/etl/jobs", a.list)
	allow("/api/etl/jobs", "GET, HEAD, POST")
	route("GET /api/etl/jobs/{id}", a.status)
	allow("/api/etl/jobs/{id}", "GET, HEAD")
	post("POST /api/etl/jobs/{id}/cancellation", a.cancel)
	allow("/api/etl/jobs/{id}/cancellation", "POST")
	post("POST /api/etl/jobs/{id}/replays", a.replay)
	allow("/api/etl/jobs/{id}/replays", "POST")
	a.registerUploads(route, post, allow)
	route("GET /api/etl/jobs/{id}/bad-records", a.badRecords)
	allow("/api/etl/jobs/{id}/bad-records", "GET, HEAD")
	post("POST /api/etl/process", a.process)
	allow("/api/etl/process", "POST")
	if opts.DiagnosticJobsEnabled {
		post("POST /api/etl/diagnostic-jobs", a.submit("diagnostic"))
		allow("/api/etl/diagnostic-jobs", "POST")
	}
	if opts.Console != nil {
		a.registerConsole(mux)
	}
	route("/api/", func(w http.ResponseWriter, r *http.Request, _ string) { writeProblem(w, r, codes.RouteNotFound) })
	health.Register(mux, opts.Pool, opts.Gatherer)
	// The server span (when tracing is on) is named by the route template,
	// never the raw path, which holds job ids.
	return tracing.HTTPHandler(a.instrument(a.recoverPanics(mux)), func(r *http.Request) string {
		_, pattern := mux.Handler(r)
		return pattern
	}), nil
}

// Server serves the HTTP API on one listener. Start and Stop follow the
// house shape (internal/startstop): Start returns once listening, Stop
// drains and is safe to call twice and concurrently. A Server runs once: a
// second Start returns startstop.ErrAlreadyStarted, a Start after Stop
// startstop.ErrStopped.
type Server struct {
	opts    Options
	handler http.Handler
	srv     *http.Server
	ss      startstop.Base

	mu sync.Mutex
	ln net.Listener // set by Start
}

// NewServer builds a Server; it does not listen until Start.
func NewServer(opts Options) (*Server, error) {
	h, err := NewHandler(opts)
	if err != nil {
		return nil, err
	}
	opts = opts.WithDefaults() // NewHandler validated a copy; fill defaults here too
	return &Server{
		opts:    opts,
		handler: h,
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       2 * time.Minute,
			WriteTimeout:      2 * time.Minute,
			IdleTimeout:       2 * time.Minute,
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          slog.NewLogLogger(opts.Logger.Handler(), slog.LevelDebug),
		},
	}, nil
}

// Handler returns the server's handler (for in-process tests).
func (s *Server) Handler() http.Handler { return s.handler }

// Console is the operator console the server serves, nil when disabled.
func (s *Server) Console() *console.Console { return s.opts.Console }

// Start listens on Options.Addr and serves in the background. It returns
// the listen error, if any (the server is then stopped: it runs once); ctx
// bounds only the start-up.
func (s *Server) Start(ctx context.Context) error {
	return s.ss.Start(ctx, func(ctx context.Context) (startstop.StopFunc, error) { return s.start(ctx, nil) })
}

// StartOn is Start on ln, a listener the caller bound (so that a taken
// port fails before anything else started): it serves on ln, whatever
// Options.Addr says, and closes ln when it stops. When it cannot start (a
// second start, a start after Stop) it closes ln and returns
// startstop's error.
func (s *Server) StartOn(ctx context.Context, ln net.Listener) error {
	err := s.ss.Start(ctx, func(ctx context.Context) (startstop.StopFunc, error) { return s.start(ctx, ln) })
	if err != nil {
		_ = ln.Close()
	}
	return err
}

// start serves on ln, or on a listener of Options.Addr when ln is nil.
func (s *Server) start(ctx context.Context, ln net.Listener) (startstop.StopFunc, error) {
	if ln == nil {
		var lc net.ListenConfig
		var err error
		if ln, err = lc.Listen(ctx, "tcp", s.opts.Addr); err != nil {
			return nil, fmt.Errorf("listen: %w", err)
		}
	}
	s.mu.Lock()
	s.ln = ln
	s.mu.Unlock()
	served := make(chan error, 1)
	go func() {
		err := s.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		served <- err
	}()
	return func(ctx context.Context) error {
		err := s.srv.Shutdown(ctx)
		if err != nil {
			// The first Stop's ctx ended: drop the requests still running.
			// That Stop returns ctx.Err(); the server is stopped all the
			// same, so a later Stop returns nil (startstop.Base).
			_ = s.srv.Close()
		}
		serveErr := <-served // Serve returns as soon as Shutdown or Close began
		if err != nil {
			return fmt.Errorf("stop http server: %w", err)
		}
		if serveErr != nil {
			return fmt.Errorf("serve http: %w", serveErr)
		}
		return nil
	}, nil
}

// Addr is the listening address (host:port) once started, else Options.Addr.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return s.ln.Addr().String()
	}
	return s.opts.Addr
}

// Stop stops accepting connections and waits for in-flight requests until
// ctx ends, then closes what remains and returns ctx.Err(). A
// Stop that joins one already running waits for it, or returns ctx.Err()
// when its own ctx ends first. Safe to call twice, concurrently, and before
// Start (a later Start then returns startstop.ErrStopped).
func (s *Server) Stop(ctx context.Context) error {
	return s.ss.Stop(ctx)
}
