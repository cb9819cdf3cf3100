// Package tracing configures OpenTelemetry tracing for the mightyETL binaries
// from the standard OTEL_* environment variables and gives the rest of the
// code one tracer and one cheap "is tracing on" check.
//
// Tracing is on only when OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
// OTEL_EXPORTER_OTLP_ENDPOINT is set (and OTEL_SDK_DISABLED is not "true").
// Otherwise Setup installs nothing: the global tracer provider stays the
// OpenTelemetry no-op, every span started through this package is a
// non-recording span, and Enabled reports false so callers can skip work
// (such as storing a trace context with a job) entirely.
//
// Spans carry only finite, payload-free attributes (design invariant 9):
// kind, outcome, attempt, batch and group sizes, failure codes and statement
// names. Never principals, idempotency keys, payloads, hashes, job or lease
// ids, SQL text or error text.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// InstrumentationName names the tracer every mightyETL span comes from.
const InstrumentationName = "github.com/mightyetl/mightyetl"

// enabled is set by Setup (and by tests through Use) when a recording tracer
// provider is installed.
var enabled atomic.Bool

// Enabled reports whether a recording tracer provider is installed. It is one
// atomic load; callers use it to skip trace-only work when tracing is off.
func Enabled() bool { return enabled.Load() }

// Tracer returns the mightyETL tracer from the global provider. With tracing
// off it is the OpenTelemetry no-op tracer.
func Tracer() trace.Tracer { return otel.Tracer(InstrumentationName) }

// Start starts a span named name as a child of ctx's span. With tracing off it
// returns ctx unchanged and a non-recording span without allocating, so the
// call costs a few nanoseconds on hot paths (BenchmarkStartOff).
func Start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !enabled.Load() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return Tracer().Start(ctx, name, trace.WithAttributes(attrs...))
}

// Config says where Setup found its settings; it is what Setup returns so a
// binary can log that tracing is on without logging the endpoint's secrets.
type Config struct {
	// Enabled is false when no OTLP endpoint is set.
	Enabled bool
	// Protocol is "http/protobuf" or "grpc" when Enabled.
	Protocol string
}

// Setup installs a batch-exporting OTLP tracer provider and the W3C trace
// context propagator when an OTLP endpoint is set in the environment, and
// nothing otherwise. defaultServiceName is used when OTEL_SERVICE_NAME is
// unset. The returned shutdown flushes and stops the exporter; it is never nil
// and is safe to call when tracing is off. Errors name the setting that is
// wrong, never its value.
func Setup(ctx context.Context, defaultServiceName string) (Config, func(context.Context) error, error) {
	noop := func(context.Context) error { return nil }
	if !endpointSet(os.Getenv) {
		return Config{}, noop, nil
	}
	protocol := strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	if protocol == "" {
		protocol = strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	if protocol == "" {
		protocol = "http/protobuf"
	}
	var client otlptrace.Client
	switch protocol {
	case "http/protobuf":
		client = otlptracehttp.NewClient()
	case "grpc":
		client = otlptracegrpc.NewClient()
	default:
		return Config{}, noop, errors.New("OTEL_EXPORTER_OTLP_PROTOCOL: want http/protobuf or grpc")
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return Config{}, noop, fmt.Errorf("start the OTLP trace exporter (%s)", protocol)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", defaultServiceName)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
		resource.WithTelemetrySDK(),
	)
	if err != nil && res == nil {
		_ = exp.Shutdown(ctx)
		return Config{}, noop, errors.New("OTEL_RESOURCE_ATTRIBUTES: not a list of key=value pairs")
	}
	// The SDK reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG itself;
	// without them it samples every root span and follows the parent.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	Use(tp)
	return Config{Enabled: true, Protocol: protocol}, func(ctx context.Context) error {
		enabled.Store(false)
		return tp.Shutdown(ctx)
	}, nil
}

// Use installs tp as the global tracer provider with the W3C trace-context
// propagator and marks tracing on. The undo installs the no-op provider. Setup calls it; tests call it with a
// provider over an in-memory exporter and undo it with the returned func.
func Use(tp trace.TracerProvider) (undo func()) {
	otel.SetTracerProvider(tp)
	// Only W3C traceparent/tracestate: baggage is client-chosen text and
	// could carry anything, so it is not propagated.
	otel.SetTextMapPropagator(propagation.TraceContext{})
	enabled.Store(true)
	return func() {
		enabled.Store(false)
		otel.SetTracerProvider(noop.NewTracerProvider())
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	}
}

func endpointSet(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	return strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) != "" ||
		strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")) != ""
}
