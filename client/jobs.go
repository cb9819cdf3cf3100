package client

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Status is a job's state.
type Status string

// The five job states. PENDING and RUNNING are active; the others are
// terminal and never change again.
const (
	StatusPending   Status = "PENDING"
	StatusRunning   Status = "RUNNING"
	StatusSucceeded Status = "SUCCEEDED"
	StatusFailed    Status = "FAILED"
	StatusCancelled Status = "CANCELLED"
)

// Terminal reports whether s is SUCCEEDED, FAILED or CANCELLED.
func (s Status) Terminal() bool {
	return s == StatusSucceeded || s == StatusFailed || s == StatusCancelled
}

// Job is a job's status object (GET /api/etl/jobs/{id}).
type Job struct {
	// ID is the job's jobRecordId (a UUID).
	ID     string `json:"jobRecordId"`
	Status Status `json:"jobStatus"`
	// AttemptCount is the number of runs started so far.
	AttemptCount int `json:"attemptCount"`
	// FailureCode is set on a FAILED job only.
	FailureCode string    `json:"failureCode,omitempty"`
	CreatedAt   time.Time `json:"createdAt"`
	UpdatedAt   time.Time `json:"updatedAt"`
	// ReplaySourceID, ReplayRootID and ReplayGeneration are set on a job
	// created by Replay only: the job it replays, the first job of the
	// chain, and its generation (1..100).
	ReplaySourceID   string `json:"replaySourceJobRecordId,omitempty"`
	ReplayRootID     string `json:"replayRootJobRecordId,omitempty"`
	ReplayGeneration int    `json:"replayGenerationCount,omitempty"`
	// Progress is a chunked job's loading progress (a job submitted by
	// Upload or SubmitUpload); nil for other jobs.
	Progress *Progress `json:"progress,omitempty"`
	// Priority is the job's priority, 1 (highest) .. 4 (lowest); 2 unless
	// its submission or replay set one (WithPriority).
	Priority int `json:"priority,omitempty"`
	// NotBefore is set only while the job is PENDING and may not be claimed
	// before that time, by the service's database clock when it answered: a
	// scheduled job (WithNotBefore), or a retry waiting out its backoff.
	NotBefore *time.Time `json:"notBefore,omitempty"`
	// ETag is the representation's entity tag ("" in list pages); Get and
	// Wait use it for conditional requests.
	ETag string `json:"-"`
	// RetryAfter is the service's polling hint while the job is active,
	// zero otherwise and in list pages.
	RetryAfter time.Duration `json:"-"`
}

// Progress is how far a chunked job has loaded: the service commits each
// chunk of records with a checkpoint, and the job's rows become visible all
// together when it succeeds.
type Progress struct {
	// RecordsLoaded is the number of records loaded by committed chunks.
	RecordsLoaded int64 `json:"recordsLoaded"`
	// RecordsTotal is the payload's number of records, nil while unknown.
	RecordsTotal *int64 `json:"recordsTotal,omitempty"`
	// ChunksDone is the number of committed chunks.
	ChunksDone int64 `json:"chunksDone"`
	// BadRecords is the number of records skipped under maxBadRecords.
	BadRecords int64 `json:"badRecords"`
	// FailedRecordNumber is, on a job failed by a record, that record's
	// number (its line in JSON Lines, its 1-based position in an array).
	FailedRecordNumber *int64 `json:"failedRecordNumber,omitempty"`
	// LastCheckpointAt is when the last chunk committed, nil before one.
	LastCheckpointAt *time.Time `json:"lastCheckpointAt,omitempty"`
	// PayloadBytes is the size of the job's (uncompressed) payload.
	PayloadBytes int64 `json:"payloadBytes"`
}

// Submission is the answer to Submit, SubmitDiagnostic and Replay (and to a
// NATS request): the job created for the request, or, Replayed, the job an
// earlier request with the same key and body created.
type Submission struct {
	JobID string `json:"jobRecordId"`
	// Status is the job's status when the answer was made.
	Status Status `json:"jobStatus"`
	// StatusURL is the job's path, "/api/etl/jobs/<id>".
	StatusURL string `json:"statusUrl"`
	// Key is the idempotency key the request was sent with: the caller's,
	// or the one generated for it. Repeat the request with it.
	Key string `json:"idempotencyKey"`
	// Replayed is true when the job already existed for this key and body.
	Replayed bool `json:"idempotencyReplayed"`
	// UploadID is, for a job submitted by Upload, the upload it was made of.
	UploadID string `json:"uploadId,omitempty"`
	// Priority is the job's priority (Job.Priority); zero when the answer
	// did not carry one.
	Priority int `json:"priority,omitempty"`
	// NotBefore is the job's notBefore when the answer was made
	// (Job.NotBefore).
	NotBefore *time.Time `json:"notBefore,omitempty"`
}

// Cancellation is the answer to Cancel: the job, now CANCELLED.
type Cancellation struct {
	Job Job `json:"job"`
	// Key is the cancellation's idempotency key (the caller's or a
	// generated one).
	Key string `json:"idempotencyKey"`
	// Replayed is true when an earlier cancellation with this key had
	// already cancelled the job.
	Replayed bool `json:"idempotencyReplayed"`
}

// ProcessResult is the answer to Process.
type ProcessResult struct {
	// Processed holds the record ids in input order (one "Processed: <id>"
	// line each).
	Processed []string `json:"processed"`
	// Key is the request's idempotency key (the caller's or a generated one).
	Key string `json:"idempotencyKey"`
	// Replayed is true when the answer came from the response ledger of an
	// earlier request with this key and body (nothing was loaded again).
	Replayed bool `json:"idempotencyReplayed"`
}

// DiagnosticRequest is the body of SubmitDiagnostic. The zero value is a
// diagnostic job that succeeds at once.
type DiagnosticRequest struct {
	// DurationMillis is how long the job runs, 0..86,400,000.
	DurationMillis int64 `json:"durationMillis,omitempty"`
	// Records, when set, is a JSON array of records loaded like an ETL job's.
	Records json.RawMessage `json:"records,omitempty"`
	// FailWith is "", "transient" or "permanent".
	FailWith string `json:"failWith,omitempty"`
}

// ListOptions select a page of List or the pages of All.
type ListOptions struct {
	// Status filters by state; empty lists every state.
	Status Status
	// Priority filters by priority, 1..4; zero lists every priority.
	Priority int
	// Limit is the page size, 1..100; zero means the service default (50).
	Limit int
	// Cursor is the NextCursor of the previous page; empty starts at the
	// newest job. All ignores it.
	Cursor string
}

// Page is one page of the caller's jobs, newest first.
type Page struct {
	Jobs []Job `json:"jobs"`
	// NextCursor continues the listing; empty on the last page.
	NextCursor string `json:"nextCursor,omitempty"`
}

const jobsPath = "/api/etl/jobs"

// Submit submits records, a JSON array of flat records each with a textual
// "id", as a durable ETL job (POST /api/etl/jobs). records is sent byte for
// byte; keep it to Replay the job later. An empty key sends a generated one
// (Submission.Key). Submitting the same bytes with the same key again
// answers the same job with Replayed true (with the first submission's
// priority and notBefore, whatever opts say); other bytes with the same key
// are CodeSubmissionKeyReused. opts set the job's priority (WithPriority)
// and the earliest time it may run (WithNotBefore).
func (c *Client) Submit(ctx context.Context, records []byte, key string, opts ...SubmitOption) (*Submission, error) {
	return c.submit(ctx, jobsPath, records, key, opts)
}

// SubmitDiagnostic submits a diagnostic job (POST /api/etl/diagnostic-jobs,
// served only when the service sets MIGHTYETL_DIAGNOSTIC_JOBS_ENABLED=true;
// otherwise CodeRouteNotFound). Key and opts as for Submit.
func (c *Client) SubmitDiagnostic(ctx context.Context, req DiagnosticRequest, key string, opts ...SubmitOption) (*Submission, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("mightyetl: encode diagnostic request: %w", err)
	}
	return c.submit(ctx, "/api/etl/diagnostic-jobs", body, key, opts)
}

// Replay creates a new PENDING job from the caller's FAILED or CANCELLED
// job id (POST /api/etl/jobs/{id}/replays). records must be the source's
// original payload, byte for byte (CodeReplayPayloadMismatch otherwise).
// Key as for Submit: the same key, source and body answer the same new job.
// Without WithPriority the new job takes the source's priority; without
// WithNotBefore it may run at once.
func (c *Client) Replay(ctx context.Context, id string, records []byte, key string, opts ...SubmitOption) (*Submission, error) {
	return c.submit(ctx, jobPath(id)+"/replays", records, key, opts)
}

func (c *Client) submit(ctx context.Context, path string, body []byte, key string, opts []SubmitOption) (*Submission, error) {
	sch, perr := scheduleOf(opts)
	if perr != nil {
		return nil, perr
	}
	if body == nil {
		body = []byte{}
	}
	if key == "" {
		key = NewKey()
	}
	res, err := c.do(ctx, call{method: http.MethodPost, path: path, key: key, body: body, header: sch.httpHeader()})
	if err != nil {
		return nil, err
	}
	var s Submission
	if err := decode(res, http.StatusAccepted, &s); err != nil {
		return nil, err
	}
	s.Key, s.Replayed = key, res.header.Get("Idempotency-Replayed") == "true"
	return &s, nil
}

// Get returns the caller's job id (GET /api/etl/jobs/{id}). A malformed,
// absent or foreign id is CodeJobNotFound.
func (c *Client) Get(ctx context.Context, id string) (*Job, error) {
	j, _, err := c.GetIfChanged(ctx, id, "")
	return j, err
}

// GetIfChanged is a conditional Get: with etag (a Job.ETag) it sends
// If-None-Match, and when the job still has that tag it returns (nil, false,
// nil) after the service's 304 and no body. Otherwise it returns the job and
// true. Use Wait to poll until a job ends.
func (c *Client) GetIfChanged(ctx context.Context, id, etag string) (*Job, bool, error) {
	j, notModified, _, err := c.getConditional(ctx, id, etag)
	if err != nil || notModified {
		return nil, false, err
	}
	return j, true, nil
}

func (c *Client) getConditional(ctx context.Context, id, etag string) (job *Job, notModified bool, hint time.Duration, err error) {
	cl := call{method: http.MethodGet, path: jobPath(id)}
	if etag != "" {
		cl.header = http.Header{"If-None-Match": {etag}}
	}
	res, err := c.do(ctx, cl)
	if err != nil {
		return nil, false, 0, err
	}
	if res.status == http.StatusNotModified {
		return nil, true, retryAfter(res.header), nil
	}
	var j Job
	if err := decode(res, http.StatusOK, &j); err != nil {
		return nil, false, 0, err
	}
	j.ETag, j.RetryAfter = res.header.Get("ETag"), retryAfter(res.header)
	return &j, false, j.RetryAfter, nil
}

// DefaultPollInterval is Wait's pause when the service gives no Retry-After.
const DefaultPollInterval = time.Second

// Wait polls the job id until it is terminal and returns it. It polls
// conditionally (If-None-Match; an unchanged job is a 304 without a body),
// pausing as long as the service's Retry-After says (DefaultPollInterval
// without one). When ctx ends first it returns the last state it saw (nil
// if none) and an error wrapping ctx.Err(). Problems (CodeJobNotFound, say)
// end it at once.
func (c *Client) Wait(ctx context.Context, id string) (*Job, error) {
	return c.Watch(ctx, id, nil)
}

// Watch is Wait that also calls seen (when not nil) on Watch's goroutine
// with every new state it reads, the terminal one included. A chunked
// job's entity tag covers its Progress, so every new checkpoint is a new
// state.
func (c *Client) Watch(ctx context.Context, id string, seen func(*Job)) (*Job, error) {
	var last *Job
	for {
		var etag string
		if last != nil {
			etag = last.ETag
		}
		j, notModified, hint, err := c.getConditional(ctx, id, etag)
		if err != nil {
			if ctx.Err() != nil {
				return last, fmt.Errorf("mightyetl: wait for job: %w", ctx.Err())
			}
			return last, err
		}
		if !notModified {
			last = j
			if seen != nil {
				seen(j)
			}
		} else {
			last.RetryAfter = hint
		}
		if last.Status.Terminal() {
			return last, nil
		}
		if hint <= 0 {
			hint = DefaultPollInterval
		}
		t := time.NewTimer(hint)
		select {
		case <-ctx.Done():
			t.Stop()
			return last, fmt.Errorf("mightyetl: wait for job: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// List returns one page of the caller's jobs, newest first (GET
// /api/etl/jobs). Bad options are answered CodeInvalidPageLimit,
// CodeInvalidPageCursor, CodeInvalidStatusFilter or
// CodeInvalidPriorityFilter.
func (c *Client) List(ctx context.Context, o ListOptions) (*Page, error) {
	q := url.Values{}
	if o.Limit != 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	if o.Status != "" {
		q.Set("status", string(o.Status))
	}
	if o.Priority != 0 {
		q.Set("priority", strconv.Itoa(o.Priority))
	}
	path := jobsPath
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	res, err := c.do(ctx, call{method: http.MethodGet, path: path})
	if err != nil {
		return nil, err
	}
	var p Page
	if err := decode(res, http.StatusOK, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// All iterates over every job of the caller, newest first, fetching page
// after page (o.Limit jobs each) and following the cursors; o.Cursor is
// ignored. It yields (job, nil) for each job, or a final (zero Job, err)
// when a page cannot be read. Stopping the loop stops fetching.
func (c *Client) All(ctx context.Context, o ListOptions) iter.Seq2[Job, error] {
	return func(yield func(Job, error) bool) {
		o.Cursor = ""
		for {
			p, err := c.List(ctx, o)
			if err != nil {
				yield(Job{}, err)
				return
			}
			for _, j := range p.Jobs {
				if !yield(j, nil) {
					return
				}
			}
			if p.NextCursor == "" {
				return
			}
			o.Cursor = p.NextCursor
		}
	}
}

// Cancel cancels the caller's PENDING or RUNNING job id (POST
// /api/etl/jobs/{id}/cancellation). An empty key sends a generated one.
// Cancelling again with the same key answers the same cancellation
// (Replayed); a terminal job is CodeAlreadySucceeded, CodeAlreadyFailed or,
// cancelled with another key, CodeCancellationKeyReused.
func (c *Client) Cancel(ctx context.Context, id, key string) (*Cancellation, error) {
	if key == "" {
		key = NewKey()
	}
	res, err := c.do(ctx, call{method: http.MethodPost, path: jobPath(id) + "/cancellation", key: key})
	if err != nil {
		return nil, err
	}
	out := &Cancellation{Key: key, Replayed: res.header.Get("Idempotency-Replayed") == "true"}
	if err := decode(res, http.StatusOK, &out.Job); err != nil {
		return nil, err
	}
	out.Job.ETag = res.header.Get("ETag")
	return out, nil
}

// Process validates, transforms and loads records synchronously in one
// transaction (POST /api/etl/process). An empty key sends a generated one,
// which enables the service's response ledger and makes retries safe: the
// same key and body answer the ledger's copy (Replayed) and load nothing
// again; other bytes with the same key are CodeIdempotencyKeyReused.
func (c *Client) Process(ctx context.Context, records []byte, key string) (*ProcessResult, error) {
	if records == nil {
		records = []byte{}
	}
	if key == "" {
		key = NewKey()
	}
	res, err := c.do(ctx, call{method: http.MethodPost, path: "/api/etl/process", key: key, body: records})
	if err != nil {
		return nil, err
	}
	if res.status != http.StatusOK {
		return nil, &Error{Code: CodeUnexpectedResponse, Status: res.status, Detail: http.StatusText(res.status)}
	}
	out := &ProcessResult{Key: key, Replayed: res.header.Get("Idempotency-Replayed") == "true", Processed: []string{}}
	for line := range strings.Lines(string(res.body)) {
		if id, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "Processed: "); ok {
			out.Processed = append(out.Processed, id)
		}
	}
	return out, nil
}

// BadRecord is a record a chunked job skipped under maxBadRecords: its
// number (the line of JSON Lines, the 1-based element of an array) and the
// problem code, never its content.
type BadRecord struct {
	RecordNumber int64     `json:"recordNumber"`
	Code         ErrorCode `json:"errorCode"`
}

// BadRecordPage is one page of a job's bad records, by record number.
type BadRecordPage struct {
	Records []BadRecord `json:"items"`
	// NextCursor continues the listing; empty on the last page.
	NextCursor string `json:"nextCursor,omitempty"`
}

// BadRecords returns one page of the records the caller's chunked job id
// skipped (GET /api/etl/jobs/{id}/bad-records), limit 1..100 (zero: the
// service default, 50), from cursor (a NextCursor; empty starts at the
// first). A job without skipped records has an empty page; a malformed,
// absent or foreign id is CodeJobNotFound.
func (c *Client) BadRecords(ctx context.Context, id string, limit int, cursor string) (*BadRecordPage, error) {
	q := url.Values{}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	path := jobPath(id) + "/bad-records"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	res, err := c.do(ctx, call{method: http.MethodGet, path: path})
	if err != nil {
		return nil, err
	}
	p := BadRecordPage{Records: []BadRecord{}}
	if err := decode(res, http.StatusOK, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

func jobPath(id string) string { return jobsPath + "/" + url.PathEscape(id) }

// decode checks the status and decodes a JSON body into v.
func decode(res *response, want int, v any) error {
	if res.status != want {
		return &Error{Code: CodeUnexpectedResponse, Status: res.status, Detail: "unexpected status " + strconv.Itoa(res.status)}
	}
	if err := json.Unmarshal(res.body, v); err != nil {
		return &Error{Code: CodeUnexpectedResponse, Status: res.status, Detail: "undecodable body: " + err.Error()}
	}
	return nil
}
