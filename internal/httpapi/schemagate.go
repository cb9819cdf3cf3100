package httpapi

import (
	"net/http"

	"github.com/mightyetl/mightyetl/internal/codes"
)

// SchemaGate is the verdict of the schema-compatibility contract the HTTP
// API consults before every POST that creates or changes a job
// (schemagate.Gate implements it). Compatible must be cheap and safe for
// concurrent use.
type SchemaGate interface {
	Compatible() bool
}

// schemaRetryAfter is the Retry-After (seconds) of 503
// etl_schema_incompatible: the intake re-reads the verdict every 10 s
// (schemagate.DefaultInterval).
const schemaRetryAfter = "10"

// gateSchema answers 503 etl_schema_incompatible with Retry-After, before
// reading the body, while g reports the schema incompatible; a nil g lets
// every request through.
func gateSchema[P any, H ~func(http.ResponseWriter, *http.Request, P)](g SchemaGate, h H) H {
	if g == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request, who P) {
		if !g.Compatible() {
			if rec, ok := w.(*recorder); ok {
				rec.errorCode = codes.SchemaIncompatible
			}
			writeProblem(&retryAfterWriter{ResponseWriter: w, seconds: schemaRetryAfter}, r, codes.SchemaIncompatible)
			return
		}
		h(w, r, who)
	}
}
