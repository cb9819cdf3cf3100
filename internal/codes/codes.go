// Package codes defines every stable code the service answers or stores,
// once: the errorCode values of problems (HTTP problem+json, the
// Mightyetl-Error-Code header, NATS replies and rejections), the
// failure_code of a FAILED job and the cancellation_code of a CANCELLED
// one. This is the only place a code is named or written: every package
// refers to codes.X directly, with no alias constant of its own and no
// literal (an SQL statement splices the constant in); codes_test.go walks
// the module's non-test sources and fails on either. Codes never change
// meaning (design.md section 9).
//
// The one exception is the public client (client/), its own module, which
// cannot import this internal package: it mirrors the problem and rejection
// codes as typed client.ErrorCode constants for library users, and a
// contract test keeps them, these constants and docs/openapi.yaml in
// agreement.
package codes

// Problem codes of the submission, read and cancel use cases (package
// intake, package etl), answered by every transport.
const (
	// InvalidJSON: the body is absent, not UTF-8, not well-formed JSON, not
	// an array, nests deeper than the limit, has trailing data, or some
	// object repeats a member name; also a NATS object request that is not
	// a well-formed Object Store reference (events.ParseObjectRequest).
	InvalidJSON = "etl_invalid_json"
	// InvalidRecord: an array element is not an object, or a record's id, a
	// field name or an AMOUNT value is invalid.
	InvalidRecord = "etl_invalid_record"
	// BatchTooLarge: the array holds more records than
	// MIGHTYETL_MAX_BATCH_RECORDS.
	BatchTooLarge = "etl_batch_too_large"
	// InvalidIdempotencyKey: the Idempotency-Key is malformed.
	InvalidIdempotencyKey = "etl_invalid_idempotency_key"
	// PrincipalRequired: the credentials (or a request subject) do not
	// name a usable principal.
	PrincipalRequired = "etl_idempotency_principal_required"
	// SubmissionKeyReused: the key was used for a job with another body.
	SubmissionKeyReused = "etl_job_submission_key_reused"
	// IdempotencyKeyReused: the key was used on the synchronous path with
	// another body.
	IdempotencyKeyReused = "etl_idempotency_key_reused"
	// JobNotFound: no such job exists for the caller.
	JobNotFound = "etl_job_not_found"
	// CancellationKeyRequired: a cancel without an Idempotency-Key.
	CancellationKeyRequired = "etl_job_cancellation_key_required"
	// CancellationKeyReused: the job was cancelled with another key.
	CancellationKeyReused = "etl_job_cancellation_key_reused"
	// AlreadySucceeded: the job succeeded before it could be cancelled.
	AlreadySucceeded = "etl_job_already_succeeded"
	// AlreadyFailed: the job failed before it could be cancelled.
	AlreadyFailed = "etl_job_already_failed"
	// InvalidPageLimit: limit is not a canonical integer from 1 to 100.
	InvalidPageLimit = "etl_invalid_job_page_limit"
	// InvalidPageCursor: cursor is not a nextCursor given to this caller.
	InvalidPageCursor = "etl_invalid_job_page_cursor"
	// InvalidStatusFilter: status is not a job status.
	InvalidStatusFilter = "etl_invalid_job_status_filter"
	// InvalidPriorityFilter: priority is not one digit 1..4.
	InvalidPriorityFilter = "etl_invalid_job_priority_filter"
	// InvalidPriority: the Mightyetl-Priority header (HTTP or NATS) is not
	// exactly one digit 1..4, or is repeated.
	InvalidPriority = "etl_invalid_priority"
	// InvalidNotBefore: the Mightyetl-Not-Before header (HTTP or NATS) is
	// not one RFC 3339 date-time with an offset, or lies beyond the
	// intake's MIGHTYETL_MAX_SCHEDULE_HORIZON.
	InvalidNotBefore = "etl_invalid_not_before"
	// ReplayKeyRequired: a replay without an Idempotency-Key.
	ReplayKeyRequired = "etl_job_replay_key_required"
	// ReplayKeyReused: the key replayed another job or with another body.
	ReplayKeyReused = "etl_job_replay_key_reused"
	// ReplayPayloadMismatch: the body is not the job's original payload.
	ReplayPayloadMismatch = "etl_job_replay_payload_mismatch"
	// ReplaySourceActive: the job is still PENDING or RUNNING.
	ReplaySourceActive = "etl_job_replay_source_active"
	// ReplaySourceSucceeded: the job succeeded; only FAILED or CANCELLED
	// jobs are replayed.
	ReplaySourceSucceeded = "etl_job_replay_source_succeeded"
	// ReplayGenerationExhausted: the job is the last replay its chain
	// allows.
	ReplayGenerationExhausted = "etl_job_replay_generation_exhausted"
	// ReplayRequiresUpload: the job is a large (chunked) job; it is replayed
	// by uploading its payload again and submitting it with replayOf.
	ReplayRequiresUpload = "etl_job_replay_requires_upload"
	// OwnerQuotaExceeded: the caller's submission rate
	// (MIGHTYETL_OWNER_SUBMIT_RATE) or pending jobs
	// (MIGHTYETL_OWNER_MAX_PENDING_JOBS), or its override, would be exceeded;
	// retry after Retry-After seconds with the same key and body.
	OwnerQuotaExceeded = "etl_owner_quota_exceeded"
	// TargetUnavailable: the database is unavailable (retry with the same
	// key and body); also the failure_code of a job whose transient
	// failures outlasted its attempts.
	TargetUnavailable = "etl_target_unavailable"
	// InternalError: anything else; also the failure_code of a job whose
	// handler failed unexpectedly.
	InternalError = "etl_internal_error"
)

// Problem codes of large-job uploads (package intake, issue 32), answered
// by the HTTP transport.
const (
	// UploadNotFound: no such upload exists for the caller.
	UploadNotFound = "etl_upload_not_found"
	// UploadExpired: the upload stayed OPEN past its expiry.
	UploadExpired = "etl_upload_expired"
	// UploadDigestMismatch: a part's bytes, or the whole payload's, do not
	// have the SHA-256 the client declared.
	UploadDigestMismatch = "etl_upload_digest_mismatch"
	// UploadIncomplete: the upload's parts are not numbered 1..N without a
	// gap, or there are none.
	UploadIncomplete = "etl_upload_incomplete"
	// UploadAlreadySubmitted: the upload already made a job.
	UploadAlreadySubmitted = "etl_upload_already_submitted"
	// UploadTooLarge: a part, or the payload's bytes or records, beyond the
	// configured limits.
	UploadTooLarge = "etl_upload_too_large"
	// UploadOwnerQuotaExceeded: the caller's OPEN uploads would stage more
	// bytes than one owner may.
	UploadOwnerQuotaExceeded = "etl_upload_owner_quota_exceeded"
	// InvalidUploadPart: the part number is out of range, the X-Part-SHA256
	// header is malformed or the gzip body is broken.
	InvalidUploadPart = "etl_invalid_upload_part"
)

// Problem codes only the HTTP transport answers (package httpapi).
const (
	// AuthenticationRequired: valid credentials are required.
	AuthenticationRequired = "etl_authentication_required"
	// PayloadTooLarge: the body exceeds the configured size limit.
	PayloadTooLarge = "etl_payload_too_large"
	// RouteNotFound: no such resource.
	RouteNotFound = "etl_route_not_found"
	// MethodNotAllowed: the resource does not support the method.
	MethodNotAllowed = "etl_method_not_allowed"
	// UnsupportedMediaType: a body without Content-Type: application/json.
	UnsupportedMediaType = "etl_unsupported_media_type"
	// ServerBusy: the in-flight request body budget is spent; retry after
	// Retry-After seconds.
	ServerBusy = "etl_server_busy"
	// AuthenticationRateLimited: Basic authentication refused the request
	// for too many failed or waiting logins from its address.
	AuthenticationRateLimited = "etl_authentication_rate_limited"
	// AuthenticationOverloaded: password verification is at capacity.
	AuthenticationOverloaded = "etl_authentication_overloaded"
	// OperatorRequired: authenticated, but not an operator.
	OperatorRequired = "etl_operator_required"
	// OpsInvalidFilter: an operator route's filter value is unknown.
	OpsInvalidFilter = "etl_ops_invalid_filter"
	// SchemaIncompatible: the database's schema is outside this intake's
	// compatible range (pg.CheckCompatibility), so it accepts no POST that
	// creates or changes a job; retry after Retry-After seconds with the
	// same Idempotency-Key and body (another intake, or this one once the
	// schema or the binary is upgraded, accepts it).
	SchemaIncompatible = "etl_schema_incompatible"
)

// Rejection codes only the NATS request consumer answers (package events).
const (
	// ReplySubjectForbidden: the request's reply header is not a literal
	// subject under its principal's reply inbox prefix.
	ReplySubjectForbidden = "etl_reply_subject_forbidden"
	// MsgIDForbidden: the request carries a Nats-Msg-Id, which JetStream
	// deduplicates across every principal's requests; the key belongs in
	// the Mightyetl-Idempotency-Key header.
	MsgIDForbidden = "etl_nats_msg_id_forbidden"
	// RequestDeliveriesExhausted: the request failed internally on every
	// allowed delivery.
	RequestDeliveriesExhausted = "etl_request_deliveries_exhausted"
	// UploadObjectNotFound: the request references a JetStream Object Store
	// object that does not exist (nor its bucket), was deleted, or is not in
	// the principal's own bucket.
	UploadObjectNotFound = "etl_upload_object_not_found"
)

// Failure codes of FAILED jobs (failure_code), besides TargetUnavailable
// and InternalError.
const (
	// TargetFailure: the target refused the job's rows (a constraint or
	// trigger), or a handler failed permanently with it.
	TargetFailure = "etl_target_failure"
	// JobIntegrityFailure: the stored payload does not match its digest.
	JobIntegrityFailure = "etl_job_integrity_failure"
	// JobTimeout: the attempt ran past MIGHTYETL_MAX_JOB_DURATION.
	JobTimeout = "etl_job_timeout"
	// WorkerAttemptsExhausted: the lease expired on the job's last attempt.
	WorkerAttemptsExhausted = "etl_worker_attempts_exhausted"
	// DiagnosticRequestedFailure: a diagnostic job asked to fail.
	DiagnosticRequestedFailure = "etl_diagnostic_requested_failure"
)

// Cancellation codes of CANCELLED jobs (cancellation_code).
const (
	// CancelledByOwner: the job's owner cancelled it.
	CancelledByOwner = "etl_job_cancelled_by_owner"
	// CancelledByOperator: an operator cancelled it.
	CancelledByOperator = "etl_job_cancelled_by_operator"
)

// Problems lists every problem code the HTTP API answers, in no particular
// order: the Problem.errorCode enum of docs/openapi.yaml lists the same set.
var Problems = []string{
	InvalidJSON, InvalidRecord, BatchTooLarge, InvalidIdempotencyKey, PrincipalRequired,
	SubmissionKeyReused, IdempotencyKeyReused, JobNotFound, CancellationKeyRequired,
	CancellationKeyReused, AlreadySucceeded, AlreadyFailed, InvalidPageLimit, InvalidPageCursor,
	InvalidStatusFilter, InvalidPriorityFilter, InvalidPriority, InvalidNotBefore,
	ReplayKeyRequired, ReplayKeyReused, ReplayPayloadMismatch,
	ReplaySourceActive, ReplaySourceSucceeded, ReplayGenerationExhausted, ReplayRequiresUpload,
	OwnerQuotaExceeded, TargetUnavailable,
	InternalError, AuthenticationRequired, PayloadTooLarge, RouteNotFound, MethodNotAllowed,
	UnsupportedMediaType, ServerBusy, AuthenticationRateLimited, AuthenticationOverloaded,
	OperatorRequired, OpsInvalidFilter, SchemaIncompatible,
	UploadNotFound, UploadExpired, UploadDigestMismatch, UploadIncomplete, UploadAlreadySubmitted,
	UploadTooLarge, UploadOwnerQuotaExceeded, InvalidUploadPart,
}

// Rejections lists the codes only the NATS request consumer decides (a
// rejection or reply besides the use cases' problem codes).
var Rejections = []string{PrincipalRequired, ReplySubjectForbidden, MsgIDForbidden, RequestDeliveriesExhausted,
	UploadObjectNotFound}
