package events

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mightyetl/mightyetl/internal/metrics"
)

// Options configures Connect. Only URL is required.
type Options struct {
	// URL is one server URL or a comma-separated list (nats://, tls://).
	// It may carry user:password or a token; it is never logged.
	URL string
	// Name identifies the connection in server monitoring, e.g. "mightyetl-intake".
	Name string
	// CredsFile is a NATS credentials file (user JWT + NKey seed); empty means none.
	CredsFile string
	// NKeySeedFile is an NKey seed file for NKey authentication; empty means none.
	NKeySeedFile string
	// TLSCAFile is a PEM file of CAs to verify the server with; empty means the system roots.
	TLSCAFile string
	// TLSCertFile and TLSKeyFile are the client certificate for mutual TLS;
	// both or neither.
	TLSCertFile, TLSKeyFile string
	// ReconnectWait is the pause between reconnect attempts to one server;
	// zero means DefaultReconnectWait.
	ReconnectWait time.Duration
	// Timeout bounds one connection attempt; zero means
	// DefaultConnectTimeout.
	Timeout time.Duration
}

// Defaults of Options.
const (
	// DefaultReconnectWait is the pause between reconnect attempts.
	DefaultReconnectWait = time.Second
	// DefaultConnectTimeout bounds one connection attempt.
	DefaultConnectTimeout = 2 * time.Second
)

// WithDefaults returns o with a non-positive ReconnectWait or Timeout set
// to DefaultReconnectWait or DefaultConnectTimeout.
func (o Options) WithDefaults() Options {
	o.ReconnectWait = cmp.Or(max(o.ReconnectWait, 0), DefaultReconnectWait)
	o.Timeout = cmp.Or(max(o.Timeout, 0), DefaultConnectTimeout)
	return o
}

// Connect opens a NATS connection that never gives up: it retries the initial
// connection in the background when the server is down
// (RetryOnFailedConnect), reconnects forever (MaxReconnects(-1)), and keeps
// no reconnect buffer, so a publish while disconnected fails at once instead
// of being delivered late. It therefore returns a connection even when NATS
// is down; it fails only on bad options (unreadable credential or TLS files,
// an empty URL).
//
// Each outage is logged once when it starts and once when it ends (event
// names only, never the URL or error text) and shown by m.Connected; m may
// be nil. Closing the connection (Close, Drain) is not an outage: it logs
// nothing and counts no outage. The caller owns the connection and closes it (Drain or Close).
func Connect(ctx context.Context, o Options, log *slog.Logger, m *metrics.Events) (*nats.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if strings.TrimSpace(o.URL) == "" {
		return nil, errors.New("connect to nats: empty URL")
	}
	if (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
		return nil, errors.New("connect to nats: TLS certificate and key files go together")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if m == nil {
		m = metrics.NewEvents(nil)
	}
	o = o.WithDefaults()
	st := &connState{log: log, m: m}
	opts := []nats.Option{
		nats.Name(o.Name),
		nats.Timeout(o.Timeout),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(o.ReconnectWait),
		nats.ReconnectBufSize(-1),
		nats.ConnectHandler(func(*nats.Conn) { st.up("connected") }),
		nats.ReconnectHandler(func(*nats.Conn) { st.up("reconnected") }),
		// nats.go reports a disconnect on the way to closing, too (Close,
		// the end of Drain): that is no outage, and logging one would
		// tell a process shutting down that NATS failed.
		nats.DisconnectErrHandler(func(nc *nats.Conn, _ error) {
			if nc.IsClosed() {
				st.closed()
				return
			}
			st.down("disconnected")
		}),
		nats.ClosedHandler(func(*nats.Conn) { st.closed() }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { st.asyncError(err) }),
	}
	if o.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	}
	if o.NKeySeedFile != "" {
		opt, err := nats.NkeyOptionFromSeed(o.NKeySeedFile)
		if err != nil {
			return nil, errors.New("connect to nats: cannot use the NKey seed file")
		}
		opts = append(opts, opt)
	}
	if o.TLSCAFile != "" {
		opts = append(opts, nats.RootCAs(o.TLSCAFile))
	}
	if o.TLSCertFile != "" {
		opts = append(opts, nats.ClientCert(o.TLSCertFile, o.TLSKeyFile))
	}
	nc, err := nats.Connect(o.URL, opts...)
	if err != nil {
		// nats.go's option errors name files, not secrets; the URL is not repeated.
		return nil, fmt.Errorf("connect to nats: %w", err)
	}
	st.settle(nc)
	return nc, nil
}

// connState turns nats.go's connection callbacks into one log line per
// outage transition and the connection gauge.
type connState struct {
	mu       sync.Mutex
	log      *slog.Logger
	m        *metrics.Events
	known    bool // a state has been logged
	isDown   bool
	isClosed bool
}

// settle records the state right after nats.Connect returned: connected, or
// retrying in the background.
func (s *connState) settle(nc *nats.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.known || s.isClosed {
		return
	}
	if nc.IsConnected() {
		s.setUpLocked("connected")
	} else {
		s.setDownLocked("initial_connect_failed")
	}
}

func (s *connState) up(event string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setUpLocked(event)
}

func (s *connState) setUpLocked(event string) {
	if s.isClosed {
		return
	}
	if !s.known || s.isDown {
		s.log.Info("nats connection available", "event", event)
	}
	s.known, s.isDown = true, false
	s.m.Connected.Set(1)
}

func (s *connState) down(event string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setDownLocked(event)
}

func (s *connState) setDownLocked(event string) {
	if s.isClosed {
		return
	}
	if !s.known || !s.isDown {
		s.log.Warn("nats unavailable; continuing on database polling and reconnecting in the background", "event", event)
		s.m.Outages.Inc()
	}
	s.known, s.isDown = true, true
	s.m.Connected.Set(0)
}

func (s *connState) closed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.isClosed = true
	s.m.Connected.Set(0)
}

// asyncError counts an asynchronous client error by kind. The error text can
// name a subject (and a request subject names a principal), so only the kind
// is logged.
func (s *connState) asyncError(err error) {
	kind := metrics.NATSErrOther
	switch {
	case errors.Is(err, nats.ErrSlowConsumer):
		kind = metrics.NATSErrSlowConsumer
	case errors.Is(err, nats.ErrPermissionViolation),
		strings.Contains(strings.ToLower(err.Error()), "permissions violation"):
		kind = metrics.NATSErrPermission
	}
	s.m.AsyncErrors.WithLabelValues(kind).Inc()
	s.log.Warn("nats asynchronous error", "kind", kind)
}
