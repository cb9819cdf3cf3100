package client

import (
	"fmt"
	"time"
)

// ErrorCode is the stable errorCode of a problem answered by the service
// (an RFC 9457 problem document over HTTP, a Mightyetl-Error-Code header or
// a rejection over NATS). Switch on it; never on the detail text.
type ErrorCode string

// The problem codes of the HTTP contract (docs/openapi.yaml, Problem.errorCode).
const (
	CodeInvalidJSON                ErrorCode = "etl_invalid_json"
	CodeInvalidIdempotencyKey      ErrorCode = "etl_invalid_idempotency_key"
	CodeAuthenticationRequired     ErrorCode = "etl_authentication_required"
	CodePrincipalRequired          ErrorCode = "etl_idempotency_principal_required"
	CodePayloadTooLarge            ErrorCode = "etl_payload_too_large"
	CodeBatchTooLarge              ErrorCode = "etl_batch_too_large"
	CodeInvalidRecord              ErrorCode = "etl_invalid_record"
	CodeSubmissionKeyReused        ErrorCode = "etl_job_submission_key_reused"
	CodeIdempotencyKeyReused       ErrorCode = "etl_idempotency_key_reused"
	CodeInvalidPageLimit           ErrorCode = "etl_invalid_job_page_limit"
	CodeInvalidPageCursor          ErrorCode = "etl_invalid_job_page_cursor"
	CodeInvalidStatusFilter        ErrorCode = "etl_invalid_job_status_filter"
	CodeInvalidPriorityFilter      ErrorCode = "etl_invalid_job_priority_filter"
	CodeInvalidPriority            ErrorCode = "etl_invalid_priority"
	CodeInvalidNotBefore           ErrorCode = "etl_invalid_not_before"
	CodeCancellationKeyRequired    ErrorCode = "etl_job_cancellation_key_required"
	CodeCancellationKeyReused      ErrorCode = "etl_job_cancellation_key_reused"
	CodeAlreadySucceeded           ErrorCode = "etl_job_already_succeeded"
	CodeAlreadyFailed              ErrorCode = "etl_job_already_failed"
	CodeReplayKeyRequired          ErrorCode = "etl_job_replay_key_required"
	CodeReplayKeyReused            ErrorCode = "etl_job_replay_key_reused"
	CodeReplayPayloadMismatch      ErrorCode = "etl_job_replay_payload_mismatch"
	CodeReplaySourceActive         ErrorCode = "etl_job_replay_source_active"
	CodeReplaySourceSucceeded      ErrorCode = "etl_job_replay_source_succeeded"
	CodeReplayGenerationExhausted  ErrorCode = "etl_job_replay_generation_exhausted"
	CodeReplayRequiresUpload       ErrorCode = "etl_job_replay_requires_upload"
	CodeOwnerQuotaExceeded         ErrorCode = "etl_owner_quota_exceeded"
	CodeJobNotFound                ErrorCode = "etl_job_not_found"
	CodeRouteNotFound              ErrorCode = "etl_route_not_found"
	CodeMethodNotAllowed           ErrorCode = "etl_method_not_allowed"
	CodeUnsupportedMediaType       ErrorCode = "etl_unsupported_media_type"
	CodeServerBusy                 ErrorCode = "etl_server_busy"
	CodeTargetUnavailable          ErrorCode = "etl_target_unavailable"
	CodeInternalError              ErrorCode = "etl_internal_error"
	CodeAuthenticationRateLimited  ErrorCode = "etl_authentication_rate_limited"
	CodeAuthenticationOverloaded   ErrorCode = "etl_authentication_overloaded"
	CodeOperatorRequired           ErrorCode = "etl_operator_required"
	CodeOpsInvalidFilter           ErrorCode = "etl_ops_invalid_filter"
	CodeSchemaIncompatible         ErrorCode = "etl_schema_incompatible"
	CodeReplySubjectForbidden      ErrorCode = "etl_reply_subject_forbidden"
	CodeMsgIDForbidden             ErrorCode = "etl_nats_msg_id_forbidden"
	CodeRequestDeliveriesExhausted ErrorCode = "etl_request_deliveries_exhausted"
	CodeUnexpectedResponse         ErrorCode = "etl_unexpected_response"
)

// The problem codes of uploads (Upload and the upload calls).
const (
	// CodeUploadNotFound: no such upload exists for the caller.
	CodeUploadNotFound ErrorCode = "etl_upload_not_found"
	// CodeUploadExpired: the upload lapsed before it was submitted.
	CodeUploadExpired ErrorCode = "etl_upload_expired"
	// CodeUploadDigestMismatch: a part's bytes, or the parts together, do
	// not have the SHA-256 sent with them.
	CodeUploadDigestMismatch ErrorCode = "etl_upload_digest_mismatch"
	// CodeUploadIncomplete: the parts are not numbered 1..N without a gap,
	// or there are none.
	CodeUploadIncomplete ErrorCode = "etl_upload_incomplete"
	// CodeUploadAlreadySubmitted: the upload is a job already.
	CodeUploadAlreadySubmitted ErrorCode = "etl_upload_already_submitted"
	// CodeUploadTooLarge: the payload's bytes or records, or a part, are
	// beyond the service's limits.
	CodeUploadTooLarge ErrorCode = "etl_upload_too_large"
	// CodeUploadOwnerQuotaExceeded: the caller's open uploads hold as many
	// bytes as the service allows one owner.
	CodeUploadOwnerQuotaExceeded ErrorCode = "etl_upload_owner_quota_exceeded"
	// CodeInvalidUploadPart: the part number is out of range, the
	// X-Part-SHA256 header is malformed or the gzip body is broken.
	CodeInvalidUploadPart ErrorCode = "etl_invalid_upload_part"
	// CodeUploadObjectNotFound: a NATS request's Object Store object (or
	// its bucket) does not exist, or is not in the principal's own bucket
	// (a rejection, never an HTTP problem).
	CodeUploadObjectNotFound ErrorCode = "etl_upload_object_not_found"
)

// Error is a problem answered by the service. Over HTTP it is the RFC 9457
// problem document (Status is the HTTP status); over NATS it is the code of
// the intake's reply or of a rejection (Status is zero). An answer that is
// not a problem document (a proxy's error page, say) is an Error with Code
// "etl_unexpected_response" and the HTTP status.
//
// Match it with errors.As and switch on Code, or with errors.Is against an
// *Error that has only Code set.
type Error struct {
	// Code is the problem's errorCode.
	Code ErrorCode
	// Status is the HTTP status; zero for NATS answers.
	Status int
	// Title and Detail are the problem's fixed texts; Detail may be empty.
	Title, Detail string
	// Instance is the request path the problem is about.
	Instance string
	// RetryAfter is the server's Retry-After hint, zero when absent.
	RetryAfter time.Duration
	// RecordIndex is, for CodeInvalidRecord, the zero-based position of
	// the first invalid record in the request's array (the problem's
	// recordIndex member); nil for every other code, and when the service
	// did not send it. The service never names the record's content or id.
	RecordIndex *int
}

// Error returns "mightyetl: <status> <code>: <detail>" on one line, with
// "record <n>: " before the detail when RecordIndex is set. It never
// contains credentials, keys or payloads.
func (e *Error) Error() string {
	s := "mightyetl: "
	if e.Status != 0 {
		s += fmt.Sprintf("%d ", e.Status)
	}
	s += string(e.Code)
	if e.RecordIndex != nil {
		s += fmt.Sprintf(": record %d", *e.RecordIndex)
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is reports whether target is an *Error with the same Code (and, when
// target's Status is set, the same Status).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	return t.Code == e.Code && (t.Status == 0 || t.Status == e.Status)
}

// Transient reports whether the same request may succeed later unchanged:
// 429 (among them CodeOwnerQuotaExceeded, also when a NATS rejection
// carries it), 503 and NATS deliveries exhausted. The client retries these
// itself within its RetryPolicy; one that still comes back has used the
// budget.
func (e *Error) Transient() bool {
	return e.Status == 429 || e.Status == 503 || e.Code == CodeRequestDeliveriesExhausted || e.Code == CodeOwnerQuotaExceeded
}
