package client

import (
	"bytes"
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/mightyetl/mightyetl/client/backoff"
)

// DefaultBaseURL is the address `etlctl dev` and the intake listen on by
// default.
const DefaultBaseURL = "http://127.0.0.1:8080"

// DefaultUserAgent is the User-Agent of a Client without WithUserAgent.
const DefaultUserAgent = "mightyetl-go-client/1"

// maxResponseBytes bounds a response body the client reads (a job page is
// at most 100 status objects; a synchronous load answers one line per
// record of at most 100,000).
const maxResponseBytes = 64 << 20

// Client calls the mightyETL job API. Create it with New; the zero value is
// not usable. A Client is safe for concurrent use.
type Client struct {
	base      *url.URL
	hc        *http.Client
	authorize func(ctx context.Context, h http.Header) error
	userAgent string
	retry     RetryPolicy
}

// Option configures a Client in New.
type Option func(*Client)

// TokenSource supplies the bearer token of each request. Token is called
// once per attempt, so an implementation can refresh an expiring JWT; it
// must be safe for concurrent use. An error ends the call without sending.
type TokenSource interface {
	Token(ctx context.Context) (string, error)
}

// StaticToken is a TokenSource that always returns the same token.
type StaticToken string

// Token returns the token itself.
func (s StaticToken) Token(context.Context) (string, error) { return string(s), nil }

// WithBasicAuth authenticates every request with HTTP Basic credentials
// (MIGHTYETL_AUTH_MODE=basic). It replaces WithBearerToken.
func WithBasicAuth(user, password string) Option {
	v := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
	return func(c *Client) {
		c.authorize = func(_ context.Context, h http.Header) error { h.Set("Authorization", v); return nil }
	}
}

// WithBearerToken authenticates every request with "Authorization: Bearer
// <token>" (MIGHTYETL_AUTH_MODE=jwt), asking ts for the token on every
// attempt. It replaces WithBasicAuth.
func WithBearerToken(ts TokenSource) Option {
	return func(c *Client) {
		c.authorize = func(ctx context.Context, h http.Header) error {
			tok, err := ts.Token(ctx)
			if err != nil {
				return fmt.Errorf("bearer token: %w", err)
			}
			h.Set("Authorization", "Bearer "+tok)
			return nil
		}
	}
}

// WithHTTPClient sends requests through hc's transport, timeout and cookie
// jar instead of a client of its own (proxies and TLS belong there). The
// Client uses a copy of hc that follows no redirect, whatever hc's
// CheckRedirect says; hc itself is not changed. A nil hc keeps the default
// client.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.hc = hc
		}
	}
}

// WithUserAgent sets the User-Agent header; empty keeps DefaultUserAgent.
func WithUserAgent(ua string) Option {
	return func(c *Client) {
		if ua != "" {
			c.userAgent = ua
		}
	}
}

// WithRetry replaces the retry policy of transient failures; zero fields take
// the defaults of RetryPolicy.
func WithRetry(p RetryPolicy) Option { return func(c *Client) { c.retry = p.withDefaults() } }

// RetryPolicy bounds the retries of transient failures: connection errors
// and 429 or 503 answers. Every retry resends the same method, path,
// idempotency key and body bytes. The pause before retry n (1-based) is a
// random duration in [0, min(MaxDelay, BaseDelay*2^(n-1))] ("full jitter",
// backoff.Full), or the server's Retry-After when that is longer (capped at
// MaxDelay).
// Retries stop when MaxAttempts attempts were made or the context ends.
type RetryPolicy struct {
	// MaxAttempts is the number of attempts including the first; zero
	// means 5, 1 disables retries.
	MaxAttempts int
	// BaseDelay is the first backoff bound; zero means 200ms.
	BaseDelay time.Duration
	// MaxDelay caps one pause; zero means 10s.
	MaxDelay time.Duration
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 5
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = 200 * time.Millisecond
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = 10 * time.Second
	}
	return p
}

// pause is the wait before retry n (1-based) given the server's hint.
func (p RetryPolicy) pause(n int, retryAfter time.Duration) time.Duration {
	d := backoff.Full(p.BaseDelay, p.MaxDelay, n)
	if retryAfter > d {
		d = min(retryAfter, p.MaxDelay)
	}
	return d
}

// ErrURLCredentials is returned by New for a base URL that holds
// credentials (http://user:password@host), which a URL carries into every
// text that prints it. Pass them with WithBasicAuth or WithBearerToken
// instead; a program with settings of its own (a command-line tool, say)
// matches it with errors.Is to name those settings in its message.
var ErrURLCredentials = errors.New("mightyetl: base URL must not contain credentials; pass them with WithBasicAuth or WithBearerToken")

// New returns a Client for the service at baseURL (scheme and host, with an
// optional path prefix; empty means DefaultBaseURL). The URL must not hold
// credentials (ErrURLCredentials): pass them with WithBasicAuth or
// WithBearerToken. Without an authentication option requests are sent
// without credentials (and answered 401 by a service that requires them).
func New(baseURL string, opts ...Option) (*Client, error) {
	if baseURL == "" {
		baseURL = DefaultBaseURL
	}
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, errors.New("mightyetl: base URL does not parse")
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, errors.New("mightyetl: base URL must be http:// or https:// with a host")
	}
	if u.User != nil {
		return nil, ErrURLCredentials
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""
	c := &Client{base: u, hc: &http.Client{Timeout: time.Minute}, userAgent: DefaultUserAgent, retry: RetryPolicy{}.withDefaults(),
		authorize: func(context.Context, http.Header) error { return nil }}
	for _, o := range opts {
		o(c)
	}
	c.hc = withoutRedirects(c.hc)
	return c, nil
}

// withoutRedirects returns a copy of hc that answers a redirect as the
// response itself. The API sends no redirect, and following one would send
// the request's credentials, idempotency key and body to wherever the
// Location points: Go's client keeps Authorization on another port or
// scheme of the same host, and a 307 or 308 repeats the body to any host.
// do turns the 3xx answer into an *Error.
func withoutRedirects(hc *http.Client) *http.Client {
	cp := *hc
	cp.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cp
}

// BaseURL returns the service address the client calls.
func (c *Client) BaseURL() string { return c.base.String() }

// NewKey returns a fresh random idempotency key: "mightyetl-" and 32 hex
// digits from crypto/rand (the key rules allow [A-Za-z0-9._:-]{16,128}).
func NewKey() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // never fails on supported platforms
	return fmt.Sprintf("mightyetl-%x", b)
}

// call is one logical API request.
type call struct {
	method string
	path   string // relative to the base URL, with query
	key    string // Idempotency-Key; empty sends none
	body   []byte // nil sends no body
	header http.Header
	// contentType is the body's media type; empty means application/json.
	contentType string
}

// response is a fully read answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends c, retrying transient failures with the same request. It returns
// a response with a success or 304 status, or an error: an *Error for a
// problem or a redirect (never followed nor retried: redirectError), the
// context's error, or a transport error after the budget.
func (c *Client) do(ctx context.Context, cl call) (*response, error) {
	var lastErr error
	for attempt := 1; ; attempt++ {
		res, err := c.once(ctx, cl)
		var retryAfter time.Duration
		switch {
		case err == nil && res.status >= 300 && res.status < 400 && res.status != http.StatusNotModified:
			return nil, redirectError(res.status)
		case err == nil && res.status < 400:
			return res, nil
		case err == nil:
			perr := problemOf(res)
			if !perr.Transient() {
				return nil, perr
			}
			lastErr, retryAfter = perr, perr.RetryAfter
		case ctx.Err() != nil:
			return nil, fmt.Errorf("mightyetl: %s %s: %w", cl.method, pathOnly(cl.path), ctx.Err())
		case isAuthError(err):
			return nil, err
		default:
			lastErr = fmt.Errorf("mightyetl: %s %s: %w", cl.method, pathOnly(cl.path), err)
		}
		if attempt >= c.retry.MaxAttempts {
			return nil, lastErr
		}
		t := time.NewTimer(c.retry.pause(attempt, retryAfter))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (after %d attempts; last: %v)", ctx.Err(), attempt, lastErr)
		case <-t.C:
		}
	}
}

type authError struct{ err error }

func (e authError) Error() string { return "mightyetl: " + e.err.Error() }
func (e authError) Unwrap() error { return e.err }

func isAuthError(err error) bool {
	var a authError
	return errors.As(err, &a)
}

func pathOnly(p string) string {
	s, _, _ := strings.Cut(p, "?")
	return s
}

// once sends one attempt and reads the whole answer.
func (c *Client) once(ctx context.Context, cl call) (*response, error) {
	u := c.base.String() + cl.path
	var body io.Reader
	if cl.body != nil {
		body = bytes.NewReader(cl.body)
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, u, body)
	if err != nil {
		return nil, err
	}
	for k, v := range cl.header {
		req.Header[k] = v
	}
	if cl.body != nil {
		// The intake refuses a body without it (415).
		req.Header.Set("Content-Type", cmp.Or(cl.contentType, "application/json"))
	}
	if cl.key != "" {
		req.Header.Set("Idempotency-Key", cl.key)
	}
	req.Header.Set("User-Agent", c.userAgent)
	req.Header.Set("Accept", "application/json, application/problem+json, text/plain")
	if err := c.authorize(ctx, req.Header); err != nil {
		return nil, authError{err}
	}
	res, err := c.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is in the caller's message already
		}
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxResponseBytes))
	if err != nil {
		return nil, err
	}
	return &response{status: res.StatusCode, header: res.Header, body: b}, nil
}

// redirectError is the error of a 3xx answer other than 304: an *Error
// with CodeUnexpectedResponse and the status, whose detail names the status
// but not the Location (which may carry anything the redirecting party put
// in it).
func redirectError(status int) *Error {
	return &Error{Code: CodeUnexpectedResponse, Status: status,
		Detail: fmt.Sprintf("redirect (%d %s) not followed: the API answers none; check the base URL", status, http.StatusText(status))}
}

// problemOf decodes a failure answer.
func problemOf(r *response) *Error {
	e := &Error{Status: r.status, RetryAfter: retryAfter(r.header)}
	mt, _, _ := mime.ParseMediaType(r.header.Get("Content-Type"))
	var p struct {
		Title, Detail, Instance string
		ErrorCode               string          `json:"errorCode"`
		RecordIndex             json.RawMessage `json:"recordIndex"` // a malformed one is ignored, not the problem
	}
	if mt == "application/problem+json" && json.Unmarshal(r.body, &p) == nil && p.ErrorCode != "" {
		e.Code, e.Title, e.Detail, e.Instance = ErrorCode(p.ErrorCode), p.Title, p.Detail, p.Instance
		var i int
		if p.RecordIndex != nil && json.Unmarshal(p.RecordIndex, &i) == nil && i >= 0 {
			e.RecordIndex = &i
		}
		return e
	}
	e.Code, e.Detail = CodeUnexpectedResponse, http.StatusText(r.status)
	return e
}

// retryAfter reads a Retry-After of delta seconds; zero when absent or not
// a positive integer.
func retryAfter(h http.Header) time.Duration {
	n, err := strconv.Atoi(h.Get("Retry-After"))
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}
