package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/intake"
)

// problemSpec is one row of the problem table.
type problemSpec struct {
	Status int
	Title  string
	Detail string
}

// problemTable is the one mapping from errorCode to status, title and fixed
// detail. Nothing else decides a problem's status or text.
var problemTable = map[string]problemSpec{
	codes.InvalidJSON:               {400, "Invalid JSON", "The request body must be a JSON array of records without duplicate member names."},
	codes.InvalidIdempotencyKey:     {400, "Invalid idempotency key", "Send an Idempotency-Key of 16 to 128 characters from [A-Za-z0-9._:-], raw or as a quoted structured-field string."},
	codes.AuthenticationRequired:    {401, "Unauthorized", "Valid credentials are required."},
	codes.PrincipalRequired:         {401, "Principal required", "The credentials do not name a usable principal."},
	codes.PayloadTooLarge:           {413, "Payload too large", "The request body exceeds the configured size limit."},
	codes.BatchTooLarge:             {413, "Batch too large", "The request holds more records than the configured limit."},
	codes.InvalidRecord:             {422, "Invalid record", "A record, record id, field name or AMOUNT value is invalid."},
	codes.SubmissionKeyReused:       {422, "Submission key reused", "This Idempotency-Key was already used with a different request body."},
	codes.IdempotencyKeyReused:      {422, "Idempotency key reused", "This Idempotency-Key was already used with a different request body."},
	codes.InvalidPageLimit:          {400, "Invalid page limit", "limit must be a canonical decimal integer from 1 to 100."},
	codes.InvalidPageCursor:         {400, "Invalid page cursor", "cursor must be a nextCursor value returned to the same caller."},
	codes.InvalidStatusFilter:       {400, "Invalid status filter", "status must be one of PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED."},
	codes.InvalidPriorityFilter:     {400, "Invalid priority filter", "priority must be one digit from 1 to 4."},
	codes.InvalidPriority:           {400, "Invalid priority", "Mightyetl-Priority must be sent once, as one digit from 1 (highest) to 4 (lowest)."},
	codes.InvalidNotBefore:          {400, "Invalid not-before time", "Mightyetl-Not-Before must be sent once, as an RFC 3339 date-time with an offset, at most the configured schedule horizon ahead."},
	codes.CancellationKeyRequired:   {400, "Cancellation key required", "Send an Idempotency-Key of 16 to 128 characters from [A-Za-z0-9._:-] to cancel a job."},
	codes.CancellationKeyReused:     {422, "Cancellation key reused", "The job was already cancelled with a different Idempotency-Key."},
	codes.AlreadySucceeded:          {409, "Job already succeeded", "The job succeeded before it could be cancelled."},
	codes.AlreadyFailed:             {409, "Job already failed", "The job failed before it could be cancelled."},
	codes.ReplayKeyRequired:         {400, "Replay key required", "Send an Idempotency-Key of 16 to 128 characters from [A-Za-z0-9._:-] to replay a job."},
	codes.ReplayKeyReused:           {422, "Replay key reused", "This Idempotency-Key was already used to replay another job or with a different body."},
	codes.ReplayPayloadMismatch:     {422, "Replay payload mismatch", "The request body must be the byte-identical original payload of the job being replayed."},
	codes.ReplaySourceActive:        {409, "Replay source active", "The job is still PENDING or RUNNING; only a FAILED or CANCELLED job can be replayed."},
	codes.ReplaySourceSucceeded:     {409, "Replay source succeeded", "The job succeeded; only a FAILED or CANCELLED job can be replayed."},
	codes.ReplayGenerationExhausted: {409, "Replay generation exhausted", "The job is the 100th replay of its chain and cannot be replayed again."},
	codes.ReplayRequiresUpload:      {409, "Replay requires upload", "The job is a large job; replay it by uploading its payload again and submitting the upload with replayOf."},
	codes.OwnerQuotaExceeded:        {429, "Owner quota exceeded", "The caller's submission rate or pending jobs are at their configured limit; retry after Retry-After seconds with the same Idempotency-Key and body."},
	codes.JobNotFound:               {404, "Job not found", "No such job exists for the caller."},
	codes.RouteNotFound:             {404, "Not found", "No such resource."},
	codes.MethodNotAllowed:          {405, "Method not allowed", "The resource does not support this method."},
	codes.UnsupportedMediaType:      {415, "Unsupported media type", "A request body must be sent with Content-Type: application/json."},
	codes.ServerBusy:                {503, "Server busy", "The server holds as many request bodies as it is configured to; retry after Retry-After seconds with the same Idempotency-Key and body."},
	codes.TargetUnavailable:         {503, "Target unavailable", "The database is unavailable; retry with backoff using the same Idempotency-Key and body."},
	codes.InternalError:             {500, "Internal error", "The request could not be completed."},
	codes.AuthenticationRateLimited: {429, "Too many login attempts", "Too many failed or waiting logins from this address; retry after Retry-After seconds."},
	codes.AuthenticationOverloaded:  {503, "Authentication overloaded", "Password verification is at capacity; retry after Retry-After seconds."},
	codes.OperatorRequired:          {403, "Operator required", "This resource is for operators (MIGHTYETL_OPERATOR_PRINCIPALS or the JWT operator claim)."},
	codes.OpsInvalidFilter:          {400, "Invalid filter", "state, kind, code, from, to, before or limit has an unknown value."},
	codes.UploadNotFound:            {404, "Upload not found", "No such upload exists for the caller."},
	codes.UploadExpired:             {410, "Upload expired", "The upload was not submitted before it expired; start a new upload."},
	codes.UploadDigestMismatch:      {400, "Upload digest mismatch", "The bytes received do not have the SHA-256 sent with them; send the part (or the parts) again."},
	codes.UploadIncomplete:          {409, "Upload incomplete", "The upload's parts must be numbered 1..N without a gap; send the missing parts first."},
	codes.UploadAlreadySubmitted:    {409, "Upload already submitted", "The upload already made a job; it takes no more parts and no other job."},
	codes.UploadTooLarge:            {413, "Upload too large", "The part, or the payload's bytes or records, exceed the configured limits."},
	codes.UploadOwnerQuotaExceeded:  {413, "Upload quota exceeded", "The caller's open uploads hold as many bytes as one owner may stage; submit or delete some first."},
	codes.InvalidUploadPart:         {400, "Invalid upload part", "The part number must be 1 to 10000, X-Part-SHA256 64 lowercase hex characters, and a gzip body valid."},
	codes.SchemaIncompatible:        {503, "Schema incompatible", "The database schema is not one this server may write to during an upgrade; retry after Retry-After seconds with the same Idempotency-Key and body."},
}

// problemTypePrefix starts every problem type URI.
const problemTypePrefix = "urn:mightyetl:problem:"

// problem is the RFC 9457 body.
type problem struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail"`
	Instance  string `json:"instance"`
	ErrorCode string `json:"errorCode"`
	// RecordIndex is the extension member of etl_invalid_record: the
	// zero-based position in the request's array of the first record that
	// is invalid. Never the record's content or id. Absent (nil) for every
	// other code.
	RecordIndex *int `json:"recordIndex,omitempty"`
}

// problemFor builds the problem of code for request path; an unknown code
// becomes etl_internal_error.
func problemFor(code, path string) problem {
	spec, ok := problemTable[code]
	if !ok {
		code, spec = codes.InternalError, problemTable[codes.InternalError]
	}
	return problem{
		Type:      problemTypePrefix + strings.ReplaceAll(code, "_", "-"),
		Title:     spec.Title,
		Status:    spec.Status,
		Detail:    spec.Detail,
		Instance:  path,
		ErrorCode: code,
	}
}

// writeProblem answers r with the problem of code. Headers set earlier
// (Cache-Control, WWW-Authenticate, Allow) are kept; a validator (ETag) is
// removed because a problem is not a representation of the resource.
func writeProblem(w http.ResponseWriter, r *http.Request, code string) {
	writeProblemDoc(w, problemFor(code, r.URL.Path))
}

// writeError answers r with the problem of a use-case error: its code
// (intake.CodeOf), for etl_invalid_record the record's index
// (intake.RecordIndexOf), and for etl_owner_quota_exceeded Retry-After
// (intake.QuotaExceeded).
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	p := problemFor(intake.CodeOf(err), r.URL.Path)
	if i, ok := intake.RecordIndexOf(err); ok && p.ErrorCode == codes.InvalidRecord {
		p.RecordIndex = &i
	}
	var quota *intake.QuotaExceeded
	if errors.As(err, &quota) && p.ErrorCode == codes.OwnerQuotaExceeded {
		if rec, ok := w.(*recorder); ok {
			rec.errorCode = p.ErrorCode
		}
		w = &retryAfterWriter{ResponseWriter: w, seconds: strconv.FormatInt(quota.RetryAfterSeconds(), 10)}
	}
	// The schema moved under this server (intake's storeError): answered as
	// the schema gate answers, with its Retry-After.
	if p.ErrorCode == codes.SchemaIncompatible {
		w = &retryAfterWriter{ResponseWriter: w, seconds: schemaRetryAfter}
	}
	writeProblemDoc(w, p)
}

// writeProblemDoc writes p (see writeProblem).
func writeProblemDoc(w http.ResponseWriter, p problem) {
	if rec, ok := w.(*recorder); ok {
		rec.errorCode = p.ErrorCode
	}
	h := w.Header()
	h.Del("ETag")
	h.Del("Retry-After")
	h.Set("Content-Type", "application/problem+json")
	body, _ := json.Marshal(p)
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}
