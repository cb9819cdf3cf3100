package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Timing of the JWKS URL mode of [JWTOptions].
const (
	// DefaultJWKSRefreshInterval is the default age after which the keys
	// of a JWKS URL are fetched again.
	DefaultJWKSRefreshInterval = 5 * time.Minute
	// JWKSMinFetchGap is the shortest time between the starts of two
	// fetches of a JWKS URL, whatever asks for them: a flood of tokens
	// with unknown kids makes at most one fetch per gap, and a failing URL
	// is tried again at most once per gap.
	JWKSMinFetchGap = 10 * time.Second
	// JWKSFetchTimeout bounds one fetch of a JWKS URL, connection to last
	// byte.
	JWKSFetchTimeout = 5 * time.Second
)

// CheckJWKSURL returns an error unless s is an absolute https URL, or an
// http URL of a loopback host (localhost, 127.0.0.0/8, ::1: a sidecar or a
// test), without user information or fragment. Keys fetched over plain
// HTTP from another host could be replaced on the way.
func CheckJWKSURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return errors.New("must be an absolute https URL")
	}
	switch {
	case u.User != nil:
		return errors.New("must not hold user information")
	case u.Fragment != "" || strings.Contains(s, "#"):
		return errors.New("must not hold a fragment")
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && isLoopbackHost(u.Hostname()):
		return nil
	}
	return errors.New("must be an https URL (http only to a loopback host)")
}

func isLoopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// maxJWKSResponseBytes bounds a JWKS URL's response body, as
// maxJWKSFileBytes bounds a file.
const maxJWKSResponseBytes = maxJWKSFileBytes

// jwksSource keeps the keys of a JWKS URL fresh: it fetches the URL when
// the keys in hand are older than interval (in the background, the request
// that noticed goes on with the keys in hand) and when a token names an
// unknown kid (the request waits for the fetch, bounded by its context).
// No two fetches start within JWKSMinFetchGap, and at most one runs at a
// time. A failed fetch, or one whose content is not an acceptable JWK Set,
// keeps the keys in hand. Safe for concurrent use.
type jwksSource struct {
	url      string
	client   *http.Client
	interval time.Duration
	now      func() time.Time
	log      *slog.Logger
	install  func(*keySet)

	mu        sync.Mutex
	fetched   time.Time     // when the keys in hand were fetched
	attempted time.Time     // when the last fetch started
	inflight  chan struct{} // closed when the fetch in progress ends; nil: none
	digest    [32]byte      // SHA-256 of the body the keys in hand came from

	background sync.WaitGroup // fetches started by refreshIfStale
	fetches    atomic.Int64   // fetches started (tests)
}

// newJWKSSource checks opts.JWKSURL, fetches it once and installs its keys,
// or fails with the fetch's error.
func newJWKSSource(opts JWTOptions, now func() time.Time, install func(*keySet)) (*jwksSource, error) {
	if err := CheckJWKSURL(opts.JWKSURL); err != nil {
		return nil, fmt.Errorf("JWKS URL: %w", err)
	}
	s := &jwksSource{
		url: opts.JWKSURL,
		client: &http.Client{
			Timeout: JWKSFetchTimeout,
			// The URL is the keys' address: a redirect is answered as
			// the status it is, never followed to another host.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		interval: opts.RefreshInterval,
		now:      now,
		log:      opts.Logger,
		install:  install,
	}
	if s.interval == 0 {
		s.interval = DefaultJWKSRefreshInterval
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.attempted = now()
	s.fetches.Add(1)
	set, digest, err := s.fetch(context.Background())
	if err != nil {
		return nil, fmt.Errorf("JWKS URL: %w", err)
	}
	s.fetched, s.digest = s.attempted, digest
	install(set)
	return s, nil
}

// begin starts a fetch at now unless one runs or one started within
// JWKSMinFetchGap; the caller must then run it and call end. Otherwise it
// returns the fetch in progress (nil when none). Callers hold mu.
func (s *jwksSource) begin(now time.Time) (start bool, inflight chan struct{}) {
	if s.inflight != nil {
		return false, s.inflight
	}
	if now.Sub(s.attempted) < JWKSMinFetchGap {
		return false, nil
	}
	s.attempted = now
	s.inflight = make(chan struct{})
	s.fetches.Add(1)
	return true, nil
}

// refreshIfStale starts a background fetch when the keys in hand are older
// than the refresh interval (and begin allows one). It never waits.
func (s *jwksSource) refreshIfStale() {
	s.mu.Lock()
	now := s.now()
	if now.Sub(s.fetched) < s.interval {
		s.mu.Unlock()
		return
	}
	start, _ := s.begin(now)
	s.mu.Unlock()
	if !start {
		return
	}
	s.background.Add(1)
	go func() {
		defer s.background.Done()
		s.run(context.Background(), "interval")
	}()
}

// refreshForUnknownKID fetches the keys again for a token whose kid is not
// among them, or waits for the fetch in progress, and reports whether
// there may be new keys to look in. It returns false at once when a fetch
// started within JWKSMinFetchGap, and when ctx ends while it waits.
func (s *jwksSource) refreshForUnknownKID(ctx context.Context) bool {
	s.mu.Lock()
	start, inflight := s.begin(s.now())
	s.mu.Unlock()
	switch {
	case start:
		// The fetch outlives this request if it goes away: others may be
		// waiting on it.
		return s.run(context.WithoutCancel(ctx), "unknown kid")
	case inflight != nil:
		select {
		case <-inflight:
			return true
		case <-ctx.Done():
			return false
		}
	}
	return false
}

// run performs the fetch begin started, installs its keys when they are
// acceptable and ends it; it reports whether it installed keys.
func (s *jwksSource) run(ctx context.Context, reason string) bool {
	set, digest, err := s.fetch(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.inflight)
	s.inflight = nil
	if err != nil {
		s.log.Warn("jwks refresh failed; the keys in hand stay in use", "reason", reason, "error_class", jwksErrorClass(err))
		return false
	}
	s.fetched = s.now()
	if digest != s.digest {
		s.digest = digest
		s.log.Info("jwks keys changed", "reason", reason, "kids", len(set.byKid))
	}
	s.install(set)
	return true
}

// Classes of a failed fetch, for logs.
var (
	errJWKSUnreachable = errors.New("unreachable")
	errJWKSStatus      = errors.New("answered a status other than 200")
	errJWKSTooLarge    = fmt.Errorf("answered more than %d bytes", maxJWKSResponseBytes)
	errJWKSContent     = errors.New("content is not an acceptable JWK Set")
)

func jwksErrorClass(err error) string {
	switch {
	case errors.Is(err, errJWKSStatus):
		return "jwks_status"
	case errors.Is(err, errJWKSTooLarge), errors.Is(err, errJWKSContent):
		return "jwks_content"
	}
	return "jwks_unreachable"
}

// fetch GETs the URL within JWKSFetchTimeout and parses its body. Errors
// wrap one of the classes above.
func (s *jwksSource) fetch(ctx context.Context) (*keySet, [32]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, JWKSFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, [32]byte{}, fmt.Errorf("%w: %v", errJWKSUnreachable, err)
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	res, err := s.client.Do(req)
	if err != nil {
		return nil, [32]byte{}, fmt.Errorf("%w: %v", errJWKSUnreachable, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, [32]byte{}, fmt.Errorf("%w: %d", errJWKSStatus, res.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(res.Body, maxJWKSResponseBytes+1))
	if err != nil {
		return nil, [32]byte{}, fmt.Errorf("%w: read body: %v", errJWKSUnreachable, err)
	}
	if len(data) > maxJWKSResponseBytes {
		return nil, [32]byte{}, errJWKSTooLarge
	}
	set, err := parseKeySet(data)
	if err != nil {
		return nil, [32]byte{}, fmt.Errorf("%w: %v", errJWKSContent, err)
	}
	return set, sha256.Sum256(data), nil
}
