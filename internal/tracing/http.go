package tracing

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// HTTPHandler wraps next in a server span per request, continuing a W3C
// traceparent/tracestate from the request headers. route names the route
// template of a request (a ServeMux pattern such as "GET
// /api/etl/jobs/{id}"), which becomes the span name and http.route; the raw
// path, query, user agent and client address are never recorded, because
// paths carry job ids. With tracing off when HTTPHandler is called, it returns
// next unchanged.
//
// otelhttp is not used here: its server spans always carry url.path and
// user_agent.original, which design invariant 9 rules out.
func HTTPHandler(next http.Handler, route func(*http.Request) string) http.Handler {
	if !Enabled() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		method := knownMethod(r.Method)
		pattern := route(r)
		name := method
		if pattern != "" {
			name = pattern
			if !strings.Contains(pattern, " ") {
				name = method + " " + pattern
			}
		}
		attrs := []attribute.KeyValue{attribute.String("http.request.method", method)}
		if pattern != "" {
			attrs = append(attrs, attribute.String("http.route", pattern))
		}
		ctx, span := Tracer().Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
		defer span.End()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r.WithContext(ctx))
		span.SetAttributes(attribute.Int("http.response.status_code", sw.status))
		if sw.status >= 500 {
			span.SetStatus(codes.Error, "")
		}
	})
}

// knownMethod keeps the method attribute finite.
func knownMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "_OTHER"
}

// statusWriter records the status code; Unwrap lets http.ResponseController
// reach the underlying writer's Flush and deadlines.
type statusWriter struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.status, w.wroteHeader = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wroteHeader = true
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
