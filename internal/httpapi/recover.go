package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/mightyetl/mightyetl/internal/codes"
)

// recoverPanics turns a handler panic into 500 etl_internal_error, one
// error log line (route template and "panic" only: never the panic value,
// which may hold a payload, a principal or SQL) and a count in
// mightyetl_http_handler_panics_total{route}. A panic after the response
// header was sent cannot become a problem: the connection is aborted
// instead (http.ErrAbortHandler), so the client sees a broken response, not
// a complete-looking one. http.ErrAbortHandler itself passes through.
func (a *api) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if err, ok := p.(error); ok && errors.Is(err, http.ErrAbortHandler) {
				panic(p)
			}
			route := r.Pattern
			if route == "" {
				route = "unmatched"
			}
			if m := a.opts.Metrics; m != nil {
				m.HandlerPanics.WithLabelValues(route).Inc()
			}
			a.opts.Logger.LogAttrs(context.WithoutCancel(r.Context()), slog.LevelError, "http handler panic",
				slog.String("route", route), slog.String("error_class", codes.InternalError))
			if rec, ok := w.(*recorder); ok && rec.status != 0 {
				panic(http.ErrAbortHandler) // the header is out: abort the response
			}
			h := w.Header()
			h.Set("Cache-Control", "no-store")
			h.Del("Location")
			h.Del("Idempotency-Replayed")
			writeProblem(w, r, codes.InternalError)
		}()
		next.ServeHTTP(w, r)
	})
}
