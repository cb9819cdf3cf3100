package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/metrics"
)

// recorder captures the status and problem code of a response.
type recorder struct {
	http.ResponseWriter
	status    int
	errorCode string
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// instrument records every request's duration by route template (the mux
// pattern, never the concrete path) and status class, and logs it: failures
// (5xx) at error level, the rest at debug, with only the route, status,
// duration and error code.
func (a *api) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		route := r.Pattern
		if route == "" {
			route = "unmatched"
		}
		elapsed := time.Since(start)
		if m := a.opts.Metrics; m != nil {
			m.RequestDuration.WithLabelValues(route, metrics.StatusClass(rec.status)).Observe(elapsed.Seconds())
		}
		level := slog.LevelDebug
		if rec.status >= 500 {
			level = slog.LevelError
		}
		if a.opts.Logger.Enabled(r.Context(), level) {
			attrs := []slog.Attr{
				slog.String("route", route),
				slog.Int("status", rec.status),
				slog.Float64("duration_ms", float64(elapsed.Microseconds())/1000),
			}
			if rec.errorCode != "" {
				attrs = append(attrs, slog.String("error_class", rec.errorCode))
			}
			a.opts.Logger.LogAttrs(context.WithoutCancel(r.Context()), level, "http request", attrs...)
		}
	})
}

// apiHandler is a handler of an /api/** route, called with the
// authenticated principal.
type apiHandler func(w http.ResponseWriter, r *http.Request, principal string)

// authenticated sets Cache-Control: no-store and authenticates before h
// runs. No or bad credentials: 401 etl_authentication_required; an unusable
// principal: 401 etl_idempotency_principal_required; both with the
// authenticator's WWW-Authenticate challenge.
func (a *api) authenticated(h apiHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Cache-Control"] = noStoreValue
		principal, err := a.opts.Authenticator.Authenticate(r)
		if throttled := (*auth.ThrottleError)(nil); errors.As(err, &throttled) {
			writeAuthThrottled(w, r, throttled)
			return
		}
		if err != nil {
			w.Header().Set("WWW-Authenticate", a.opts.Authenticator.Challenge())
			code := codes.AuthenticationRequired
			if errors.Is(err, auth.ErrPrincipalUnusable) {
				code = codes.PrincipalRequired
			}
			writeProblem(w, r, code)
			return
		}
		h(w, r, principal)
	})
}

// writeAuthThrottled answers a request the authenticator refused for load
// before checking its credentials: 429 etl_authentication_rate_limited
// (this client address failed or queued too many logins) or 503
// etl_authentication_overloaded (every verification slot busy), with
// Retry-After in seconds.
func writeAuthThrottled(w http.ResponseWriter, r *http.Request, err *auth.ThrottleError) {
	code := codes.AuthenticationOverloaded
	if errors.Is(err, auth.ErrRateLimited) {
		code = codes.AuthenticationRateLimited
	}
	if rec, ok := w.(*recorder); ok {
		rec.errorCode = code
	}
	// writeProblem drops Retry-After (a job's polling hint); this one is
	// set as the header is written.
	writeProblem(&retryAfterWriter{ResponseWriter: w, seconds: strconv.FormatInt(err.RetryAfterSeconds(), 10)}, r, code)
}

// retryAfterWriter sets Retry-After when the header is written.
type retryAfterWriter struct {
	http.ResponseWriter
	seconds string
}

func (w *retryAfterWriter) WriteHeader(code int) {
	w.Header().Set("Retry-After", w.seconds)
	w.ResponseWriter.WriteHeader(code)
}

// stripWeak returns an entity tag without its weakness indicator.
func stripWeak(tag string) string { return strings.TrimPrefix(tag, "W/") }

// ifNoneMatch reports whether the If-None-Match fields of h match etag by
// the weak comparison (RFC 9110 section 13.1.2): "*" matches any current
// representation; otherwise any listed tag whose opaque part equals etag's.
func ifNoneMatch(h http.Header, etag string) bool {
	want := stripWeak(etag)
	for _, field := range h.Values("If-None-Match") {
		for _, t := range strings.Split(field, ",") {
			t = strings.Trim(t, " \t")
			if t == "*" || (t != "" && stripWeak(t) == want) {
				return true
			}
		}
	}
	return false
}
