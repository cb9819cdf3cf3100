package tracing

import (
	"context"
	"net/textproto"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Attribute keys used by mightyETL spans. Every value is finite and
// payload-free.
const (
	AttrJobKind     = attribute.Key("job.kind")     // etl_records | diagnostic
	AttrJobAttempt  = attribute.Key("job.attempt")  // 1-based attempt number
	AttrOutcome     = attribute.Key("outcome")      // a metrics outcome label value
	AttrBatchSize   = attribute.Key("batch.size")   // rows a batch statement affected
	AttrFailureCode = attribute.Key("failure.code") // a problem or failure errorCode
)

// StartExecution starts the root span of one job execution, linked to the
// submit's span when submitTraceparent (the job's stored traceparent) is
// one: claims are batched, so the execution links to its submit instead of
// being its child.
func StartExecution(ctx context.Context, kind string, attempt int, submitTraceparent string) (context.Context, trace.Span) {
	if !enabled.Load() {
		return ctx, trace.SpanFromContext(ctx)
	}
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(AttrJobKind.String(kind), AttrJobAttempt.Int(attempt))}
	if sc, ok := ParseTraceparent(submitTraceparent); ok {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	return Tracer().Start(ctx, "worker.execute", opts...)
}

// SetOutcome records a finite outcome label on span (nothing when it is
// empty or the span does not record).
func SetOutcome(span trace.Span, outcome string) {
	if outcome != "" && span.IsRecording() {
		span.SetAttributes(AttrOutcome.String(outcome))
	}
}

// EndBatch ends a batch span with the number of rows the batch affected and,
// on error, an error status without the error's text.
func EndBatch(span trace.Span, n int, err error) {
	if span.IsRecording() {
		span.SetAttributes(AttrBatchSize.Int(n))
		if err != nil {
			span.SetStatus(codes.Error, "")
		}
	}
	span.End()
}

// Fail marks span failed with a finite code and no error text.
func Fail(span trace.Span, code string) {
	if span.IsRecording() {
		if code != "" {
			span.SetAttributes(AttrFailureCode.String(code))
		}
		span.SetStatus(codes.Error, "")
	}
}

// headerCarrier reads and writes W3C trace-context headers in a NATS header
// map, whose keys keep their case: it looks for the lower-case name the W3C
// spec uses, then the canonical MIME form.
type headerCarrier map[string][]string

func (h headerCarrier) Get(key string) string {
	for _, k := range [...]string{key, textproto.CanonicalMIMEHeaderKey(key)} {
		if v := h[k]; len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

func (h headerCarrier) Set(key, value string) { h[key] = []string{value} }

func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// StartConsumer starts a consumer span named name for a message whose
// headers may carry a W3C traceparent/tracestate; the span continues that
// trace. headers is a nats.Header (or any header map); it is only read.
func StartConsumer(ctx context.Context, name string, headers map[string][]string) (context.Context, trace.Span) {
	if !enabled.Load() {
		return ctx, trace.SpanFromContext(ctx)
	}
	ctx = otel.GetTextMapPropagator().Extract(ctx, headerCarrier(headers))
	return Tracer().Start(ctx, name, trace.WithSpanKind(trace.SpanKindConsumer))
}

// Traceparent is the W3C traceparent of ctx's span when tracing is on and
// that span is sampled, else "". It is what a job stores so its execution can
// link back to the submit (at most 55 characters; no tracestate, which is
// free text).
func Traceparent(ctx context.Context) string {
	if !enabled.Load() {
		return ""
	}
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsSampled() {
		return ""
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// ParseTraceparent parses a stored W3C traceparent into a remote span
// context; ok is false for anything else.
func ParseTraceparent(s string) (trace.SpanContext, bool) {
	if len(s) != 55 || s[:3] != "00-" || s[35] != '-' || s[52] != '-' {
		return trace.SpanContext{}, false
	}
	tid, err := trace.TraceIDFromHex(s[3:35])
	if err != nil {
		return trace.SpanContext{}, false
	}
	sid, err := trace.SpanIDFromHex(s[36:52])
	if err != nil {
		return trace.SpanContext{}, false
	}
	var flags trace.TraceFlags
	if s[53:] == "01" {
		flags = trace.FlagsSampled
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags, Remote: true})
	return sc, sc.IsValid()
}

// Observe records v on o with a trace_id exemplar of sc when tracing is on
// and sc is sampled, so a slow histogram bucket links to its trace; otherwise
// it is o.Observe(v). The exemplar holds the trace id only.
func Observe(o prometheus.Observer, v float64, sc trace.SpanContext) {
	if enabled.Load() && sc.IsSampled() {
		if eo, ok := o.(prometheus.ExemplarObserver); ok {
			eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": sc.TraceID().String()})
			return
		}
	}
	o.Observe(v)
}
