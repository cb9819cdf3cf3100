// Package client is the Go client of the mightyETL job service: an HTTP
// client for every route of the job API (docs/api.md, docs/openapi.yaml) and
// a NATS producer for event-driven submissions (docs/operations/nats.md).
//
// # HTTP
//
// New returns a Client for a base URL. Every call takes a context, sends
// credentials (WithBasicAuth or WithBearerToken), and answers either a typed
// result or an error. A problem answered by the service is an *Error that
// carries its ErrorCode, HTTP status and detail:
//
//	var p *client.Error
//	if errors.As(err, &p) && p.Code == client.CodeJobNotFound { ... }
//
// Submissions, cancellations, replays and synchronous loads carry an
// idempotency key. A call given an empty key generates a random one (NewKey)
// and returns it in its result, so the caller can repeat the request later
// with the same key. Transient failures (connection errors, 503 and 429
// answers) are retried with the same key and the same body bytes, after a
// jittered exponential backoff that honours Retry-After, within a bounded
// budget (RetryPolicy). The service converges a repeated request on the
// first one's job, so a retry after a lost answer never makes a second job.
// Deterministic problems (4xx other than 429, 500) are never retried.
//
// The client follows no redirect, even through WithHTTPClient: the API
// answers none, so credentials, keys and bodies go only to the base URL. A
// 3xx answer other than 304 is an *Error with CodeUnexpectedResponse and
// the redirect's status.
//
// Wait polls a job conditionally (If-None-Match, 304 Not Modified) at the
// interval the service advises with Retry-After, until the job is terminal
// or the context ends. All iterates over every page of the caller's jobs,
// following the cursors.
//
// # NATS
//
// Producer publishes job requests on "<prefix>.requests.<principal>" through
// JetStream with the service's conventions: the idempotency key in the
// Mightyetl-Idempotency-Key header (never a Nats-Msg-Id, which another
// principal could forge to have the request dropped), a reply inbox under
// "_INBOX.<principal>." named in the Mightyetl-Reply-To header, and a
// payload limit. Publish returns when
// JetStream has stored the request; PublishAndWait also waits for the
// intake's answer, the job (a Submission) or a problem (*Error). Rejections
// subscribes to the advisory "<prefix>.rejections" subject.
//
// A Client and a Producer are safe for concurrent use.
package client
