// Package httpapi is the HTTP face of mightyETL's intake: routes, handlers,
// authentication, limits and RFC 9457 problem responses. It holds no SQL; every
// use case runs through an *intake.Service.
//
// Contract highlights (docs/api.md and docs/openapi.yaml describe all of it):
//
//   - Every /api/** request is authenticated first (401 with WWW-Authenticate
//     otherwise); /healthz, /readyz and /metrics need no credentials.
//   - Every /api/** response, success or problem, carries
//     Cache-Control: no-store.
//   - A malformed, absent or foreign job id is the same 404
//     etl_job_not_found, decided before any other detail of the job.
//   - Problems come from one table (see problemTable) with fixed titles and
//     details; 5xx responses never carry internal text.
//   - Logs (slog, JSON) and metric labels hold only the route template, the
//     status, the duration and the error code; never a payload, principal,
//     key, hash, job id, SQL or error text.
package httpapi
