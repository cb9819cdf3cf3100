package tracing

import (
	"context"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// statementNames maps SQL text to the name of the Go constant that holds it;
// see RegisterStatement.
var statementNames sync.Map // string -> string

// RegisterStatement names a SQL statement for database spans. Packages that
// own SQL register their constants at init; a statement nobody registered is
// named by its leading keyword only (db.select, db.update, ...). SQL text is
// never put in a span.
func RegisterStatement(name, sql string) { statementNames.Store(sql, name) }

// operations are the leading keywords a span name may carry; anything else
// is "other", keeping span names finite.
var operations = map[string]bool{"select": true, "insert": true, "update": true, "delete": true,
	"with": true, "begin": true, "commit": true, "rollback": true, "set": true, "listen": true,
	"unlisten": true, "notify": true, "savepoint": true, "release": true, "copy": true, "show": true}

// StatementName is the span name of sql: "db " and its registered name, or
// "db." and its leading keyword.
func StatementName(sql string) string {
	if n, ok := statementNames.Load(sql); ok {
		return "db " + n.(string)
	}
	f := strings.Fields(strings.TrimSpace(sql))
	if len(f) > 0 {
		op := strings.ToLower(strings.TrimRight(f[0], ";"))
		if operations[op] {
			return "db." + op
		}
	}
	return "db.other"
}

// PGXTracer is a pgx v5 QueryTracer that makes one client span per
// statement, named by StatementName, with no SQL text, arguments or error
// text. Install it on a pgx ConnConfig only when Enabled.
type PGXTracer struct{}

// TraceQueryStart starts the statement's span.
func (PGXTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if !trace.SpanFromContext(ctx).SpanContext().IsValid() {
		return ctx // no statement spans outside a mightyETL span
	}
	ctx, _ = Tracer().Start(ctx, StatementName(data.SQL), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system.name", "postgresql")))
	return ctx
}

// TraceQueryEnd ends the statement's span with the affected row count.
func (PGXTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.Int64("db.response.rows", data.CommandTag.RowsAffected()))
	if data.Err != nil {
		span.SetStatus(codes.Error, "")
	}
	span.End()
}

// TraceBatchStart starts a batch's span, "db.batch" (a worker's claim is
// sent as BEGIN, SET LOCAL and the claim in one batch).
func (PGXTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	if !trace.SpanFromContext(ctx).SpanContext().IsValid() {
		return ctx
	}
	ctx, _ = Tracer().Start(ctx, "db.batch", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system.name", "postgresql")))
	return ctx
}

// TraceBatchQuery records one statement of the batch as a child span named
// by StatementName, ended when its result is read (pgx reports no start of
// its own), with the affected row count.
func (PGXTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return
	}
	_, span := Tracer().Start(ctx, StatementName(data.SQL), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system.name", "postgresql")))
	span.SetAttributes(attribute.Int64("db.response.rows", data.CommandTag.RowsAffected()))
	if data.Err != nil {
		span.SetStatus(codes.Error, "")
	}
	span.End()
}

// TraceBatchEnd ends the batch's span.
func (PGXTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if data.Err != nil {
		span.SetStatus(codes.Error, "")
	}
	span.End()
}
