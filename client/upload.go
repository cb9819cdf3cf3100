package client

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// UploadFormat is how the records of an upload's payload are written.
type UploadFormat string

// The payload formats of an upload.
const (
	// FormatJSONLines is JSON Lines: one JSON object per non-empty line; a
	// record's number is its line number (1-based, counting every line).
	FormatJSONLines UploadFormat = "jsonl"
	// FormatJSONArray is one JSON array of records; a record's number is
	// its element's position (1-based).
	FormatJSONArray UploadFormat = "json_array"
)

// The states of an upload.
const (
	// UploadOpen: parts may be sent, replaced and the upload submitted.
	UploadOpen = "OPEN"
	// UploadSubmitted: the upload became a job (UploadInfo.JobID).
	UploadSubmitted = "SUBMITTED"
)

// DefaultPartSize is the size of Upload's parts (of the uncompressed source)
// when UploadOptions.PartSize is zero and no earlier part says otherwise.
const DefaultPartSize = 16 << 20

// MaxUploadParts is the highest part number the service accepts.
const MaxUploadParts = 10000

const uploadsPath = "/api/etl/uploads"

// UploadPart is a part the service holds: its number (1..MaxUploadParts),
// its size and the lowercase hex SHA-256 of its uncompressed bytes.
type UploadPart struct {
	Number int    `json:"partNumber"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// UploadInfo is an upload's representation (GET /api/etl/uploads/{id}).
type UploadInfo struct {
	// ID is the upload's uploadId (a UUID); Upload resumes with it.
	ID     string       `json:"uploadId"`
	Format UploadFormat `json:"format"`
	// State is UploadOpen or UploadSubmitted.
	State string `json:"state"`
	// StagedBytes is the sum of the parts' uncompressed sizes.
	StagedBytes int64 `json:"stagedBytes"`
	// ExpiresAt is when an OPEN upload and its parts are pruned.
	ExpiresAt time.Time `json:"expiresAt"`
	// MaxPartBytes is the largest part the service accepts.
	MaxPartBytes int64 `json:"maxPartBytes"`
	// Parts are the parts held, by part number.
	Parts []UploadPart `json:"parts"`
	// JobID is the job a SUBMITTED upload became.
	JobID string `json:"jobId,omitempty"`
}

// UploadSubmission is the body of SubmitUpload.
type UploadSubmission struct {
	// SHA256 is the lowercase hex SHA-256 of the whole uncompressed
	// payload: parts 1..N concatenated in order.
	SHA256 string `json:"sha256"`
	// MaxBadRecords is how many malformed or untransformable records the
	// job skips (counting and listing them by number) before one more
	// fails it; zero fails it at the first.
	MaxBadRecords int `json:"maxBadRecords"`
	// ReplayOf, when set, makes the job a replay of that FAILED or
	// CANCELLED chunked job; SHA256 must be the source's payload digest
	// (CodeReplayPayloadMismatch otherwise).
	ReplayOf string `json:"replayOf,omitempty"`
}

// CreateUpload opens an upload for a payload in format (POST
// /api/etl/uploads; empty means FormatJSONLines). The request is not
// idempotent: a retry after a lost answer may open a second upload, which
// expires unused.
func (c *Client) CreateUpload(ctx context.Context, format UploadFormat) (*UploadInfo, error) {
	if format == "" {
		format = FormatJSONLines
	}
	body, _ := json.Marshal(struct {
		Format UploadFormat `json:"format"`
	}{format})
	res, err := c.do(ctx, call{method: http.MethodPost, path: uploadsPath, body: body})
	if err != nil {
		return nil, err
	}
	var u UploadInfo
	if err := decode(res, http.StatusCreated, &u); err != nil {
		return nil, err
	}
	return &u, nil
}

// GetUpload returns the caller's upload id (GET /api/etl/uploads/{id}): the
// parts it holds, which is how a client resumes. A malformed, absent or
// foreign id is CodeUploadNotFound; a lapsed one CodeUploadExpired.
func (c *Client) GetUpload(ctx context.Context, id string) (*UploadInfo, error) {
	res, err := c.do(ctx, call{method: http.MethodGet, path: uploadPath(id)})
	if err != nil {
		return nil, err
	}
	var u UploadInfo
	if err := decode(res, http.StatusOK, &u); err != nil {
		return nil, err
	}
	return &u, nil
}

// PutUploadPart sends part number n (1..MaxUploadParts) of upload id (PUT
// /api/etl/uploads/{id}/parts/{n}) with the SHA-256 of data in
// X-Part-SHA256; with compress the body is data gzipped (Content-Encoding:
// gzip). Sending a part again replaces it. The service refuses a part whose
// bytes do not match the digest with CodeUploadDigestMismatch, a part number
// out of range or a bad gzip stream with CodeInvalidUploadPart, and a part
// beyond the limits with CodeUploadTooLarge or CodeUploadOwnerQuotaExceeded.
func (c *Client) PutUploadPart(ctx context.Context, id string, n int, data []byte, compress bool) (*UploadPart, error) {
	sum := sha256.Sum256(data)
	var zbuf bytes.Buffer
	return c.putPart(ctx, id, n, data, hex.EncodeToString(sum[:]), compress, &zbuf)
}

// putPart sends one part whose digest is known, gzipping it into zbuf
// (reused across parts) when compress is set.
func (c *Client) putPart(ctx context.Context, id string, n int, data []byte, digest string, compress bool, zbuf *bytes.Buffer) (*UploadPart, error) {
	h := http.Header{"X-Part-Sha256": {digest}}
	body := data
	if compress {
		zbuf.Reset()
		zw, err := gzip.NewWriterLevel(zbuf, gzip.BestSpeed)
		if err != nil {
			return nil, err
		}
		if _, err := zw.Write(data); err != nil {
			return nil, fmt.Errorf("mightyetl: gzip part: %w", err)
		}
		if err := zw.Close(); err != nil {
			return nil, fmt.Errorf("mightyetl: gzip part: %w", err)
		}
		body = zbuf.Bytes()
		h.Set("Content-Encoding", "gzip")
	}
	if body == nil {
		body = []byte{}
	}
	res, err := c.do(ctx, call{method: http.MethodPut, path: uploadPath(id) + "/parts/" + strconv.Itoa(n),
		body: body, header: h, contentType: "application/octet-stream"})
	if err != nil {
		return nil, err
	}
	var p UploadPart
	if err := decode(res, http.StatusOK, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// SubmitUpload turns the caller's OPEN upload id into a job (POST
// /api/etl/uploads/{id}/jobs). key is the Idempotency-Key (empty sends a
// generated one, Submission.Key); the same key and digest answer the same
// job again (Replayed), the same key with another digest is
// CodeSubmissionKeyReused. Parts not numbered 1..N without a gap are
// CodeUploadIncomplete; a digest that is not the parts' is
// CodeUploadDigestMismatch.
func (c *Client) SubmitUpload(ctx context.Context, id string, req UploadSubmission, key string) (*Submission, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("mightyetl: encode upload submission: %w", err)
	}
	return c.submit(ctx, uploadPath(id)+"/jobs", body, key, nil)
}

// DeleteUpload deletes the caller's OPEN upload id and its parts (DELETE
// /api/etl/uploads/{id}).
func (c *Client) DeleteUpload(ctx context.Context, id string) error {
	res, err := c.do(ctx, call{method: http.MethodDelete, path: uploadPath(id)})
	if err != nil {
		return err
	}
	if res.status != http.StatusNoContent {
		return &Error{Code: CodeUnexpectedResponse, Status: res.status, Detail: "unexpected status " + strconv.Itoa(res.status)}
	}
	return nil
}

func uploadPath(id string) string { return uploadsPath + "/" + url.PathEscape(id) }

// UploadOptions configure Upload. The zero value uploads JSON Lines in
// parts of DefaultPartSize, uncompressed, to a new upload, with a generated
// key.
type UploadOptions struct {
	// Format is the payload's format; empty means FormatJSONLines.
	Format UploadFormat
	// PartSize is the number of source bytes per part; zero means the size
	// of an earlier upload's first part when resuming, else
	// DefaultPartSize, lowered to the service's maxPartBytes. Upload holds
	// one part in memory at a time (twice with Gzip).
	PartSize int
	// Gzip sends every part gzipped (Content-Encoding: gzip); digests and
	// sizes stay those of the uncompressed bytes.
	Gzip bool
	// Size is the source's length in bytes for progress; zero means Upload
	// finds it when the source is an *os.File or has a Len method, else
	// progress reports an unknown total (-1).
	Size int64
	// UploadID resumes that upload instead of opening one: parts the
	// service holds with the digest of the same part of the source are not
	// sent again. The source must be the same bytes.
	UploadID string
	// Key is the job's Idempotency-Key; empty means a generated one
	// (Submission.Key, and UploadError.Key before the job exists).
	Key string
	// MaxBadRecords and ReplayOf are sent with the submission
	// (UploadSubmission).
	MaxBadRecords int
	ReplayOf      string
	// Progress, when set, is called on Upload's goroutine once the upload
	// is known and after every part, with non-decreasing Bytes.
	Progress func(UploadProgress)
}

// UploadProgress is the state of an Upload in progress.
type UploadProgress struct {
	// UploadID is the upload's id (resume with it).
	UploadID string
	// Bytes is how much of the source the service holds so far: parts sent
	// by this call and parts of an earlier call it found intact.
	Bytes int64
	// Sent is the part of Bytes this call sent.
	Sent int64
	// Total is the source's size, -1 when unknown.
	Total int64
	// Parts is the number of parts done.
	Parts int
}

// UploadError is the error of an Upload that stopped after its upload was
// opened or found: resume it with UploadOptions.UploadID = UploadID (and the
// same source and Key). It wraps the cause, so errors.As finds an *Error and
// errors.Is a context error.
type UploadError struct {
	UploadID string
	// Key is the idempotency key the job is (or would be) submitted with.
	Key string
	// Parts is the number of source parts the service held when it stopped.
	Parts int
	Err   error
}

// Error returns "mightyetl: upload interrupted: " and the cause's text.
func (e *UploadError) Error() string {
	return "mightyetl: upload interrupted: " + strings.TrimPrefix(e.Err.Error(), "mightyetl: ")
}

// Unwrap returns the cause.
func (e *UploadError) Unwrap() error { return e.Err }

// ErrUploadSourceMismatch is wrapped by Upload's error when a resumed upload
// cannot be the source's: it holds parts past the source's end, or it was
// submitted and a part of the source differs from the part held.
var ErrUploadSourceMismatch = errors.New("mightyetl: the upload does not hold this source")

// Upload submits a payload too large for one request as a job: it opens an
// upload (or, with o.UploadID, resumes one), reads src part by part, sends
// each part with its digest (retrying transient failures as every call
// does), then submits the upload with the SHA-256 of the whole source and
// the idempotency key, and returns the job. Resuming reads the whole source
// again to compute that digest but sends only the parts the service does not
// hold with the same digest; an upload already SUBMITTED answers its job
// (Replayed) once the source's parts are checked against it.
//
// An error after the upload was opened or found is an *UploadError with its
// id, to resume with; the service's problems are *Error values inside it.
// Upload never closes src.
func (c *Client) Upload(ctx context.Context, src io.Reader, o UploadOptions) (*Submission, error) {
	if o.Key == "" {
		o.Key = NewKey()
	}
	if o.PartSize < 0 {
		return nil, errors.New("mightyetl: upload part size must not be negative")
	}
	var info *UploadInfo
	var err error
	if o.UploadID != "" {
		info, err = c.GetUpload(ctx, o.UploadID)
	} else {
		info, err = c.CreateUpload(ctx, o.Format)
	}
	if err != nil {
		if o.UploadID != "" {
			return nil, &UploadError{UploadID: o.UploadID, Key: o.Key, Err: err}
		}
		return nil, err
	}
	u := &uploader{c: c, o: o, info: info, held: map[int]UploadPart{}}
	sub, err := u.run(ctx, src)
	if err != nil {
		return nil, &UploadError{UploadID: info.ID, Key: o.Key, Parts: u.prog.Parts, Err: err}
	}
	sub.UploadID = info.ID
	return sub, nil
}

// uploader is one Upload's state.
type uploader struct {
	c    *Client
	o    UploadOptions
	info *UploadInfo
	held map[int]UploadPart
	prog UploadProgress
}

func (u *uploader) partSize() (int, error) {
	size := u.o.PartSize
	if size == 0 {
		size = DefaultPartSize
		if p, ok := u.held[1]; ok && p.Bytes > 0 {
			size = int(p.Bytes) // the earlier call's size: its parts line up
		}
		if m := u.info.MaxPartBytes; m > 0 && int64(size) > m {
			size = int(m)
		}
	} else if m := u.info.MaxPartBytes; m > 0 && int64(size) > m {
		return 0, fmt.Errorf("mightyetl: part size %d is above the service's maxPartBytes %d", size, m)
	}
	return size, nil
}

func (u *uploader) run(ctx context.Context, src io.Reader) (*Submission, error) {
	for _, p := range u.info.Parts {
		u.held[p.Number] = p
	}
	size, err := u.partSize()
	if err != nil {
		return nil, err
	}
	u.prog = UploadProgress{UploadID: u.info.ID, Total: sourceSize(src, u.o.Size)}
	u.report()
	submitted := u.info.State == UploadSubmitted
	whole := sha256.New()
	buf := make([]byte, size)
	var zbuf bytes.Buffer
	n := 0
	for {
		k, rerr := io.ReadFull(src, buf)
		if k == 0 && rerr == io.EOF {
			break
		}
		if rerr != nil && rerr != io.ErrUnexpectedEOF {
			return nil, fmt.Errorf("read source: %w", rerr)
		}
		if n++; n > MaxUploadParts {
			return nil, fmt.Errorf("mightyetl: the source needs more than %d parts of %d bytes; use a larger part size", MaxUploadParts, size)
		}
		data := buf[:k]
		whole.Write(data)
		sum := sha256.Sum256(data)
		digest := hex.EncodeToString(sum[:])
		if p, ok := u.held[n]; ok && p.SHA256 == digest && p.Bytes == int64(k) {
			u.prog.Bytes += int64(k)
		} else {
			if submitted {
				return nil, fmt.Errorf("part %d: %w", n, ErrUploadSourceMismatch)
			}
			if _, err := u.c.putPart(ctx, u.info.ID, n, data, digest, u.o.Gzip, &zbuf); err != nil {
				return nil, err
			}
			u.prog.Bytes += int64(k)
			u.prog.Sent += int64(k)
		}
		u.prog.Parts = n
		u.report()
		if rerr == io.ErrUnexpectedEOF {
			break
		}
	}
	for num := range u.held {
		if num > n {
			return nil, fmt.Errorf("part %d is past the source's %d parts: %w", num, n, ErrUploadSourceMismatch)
		}
	}
	if submitted && u.info.JobID != "" {
		j, err := u.c.Get(ctx, u.info.JobID)
		if err != nil {
			return nil, err
		}
		return &Submission{JobID: j.ID, Status: j.Status, StatusURL: jobPath(j.ID), Key: u.o.Key, Replayed: true}, nil
	}
	return u.c.SubmitUpload(ctx, u.info.ID, UploadSubmission{SHA256: hex.EncodeToString(whole.Sum(nil)),
		MaxBadRecords: u.o.MaxBadRecords, ReplayOf: u.o.ReplayOf}, u.o.Key)
}

func (u *uploader) report() {
	if u.o.Progress != nil {
		u.o.Progress(u.prog)
	}
}

// sourceSize is the number of bytes left in src: size when positive, else
// what a regular file or a Len method says, else -1.
func sourceSize(src io.Reader, size int64) int64 {
	if size > 0 {
		return size
	}
	switch s := src.(type) {
	case *os.File:
		st, err := s.Stat()
		if err != nil || !st.Mode().IsRegular() {
			return -1
		}
		off, err := s.Seek(0, io.SeekCurrent)
		if err != nil {
			return -1
		}
		return st.Size() - off
	case interface{ Len() int }:
		return int64(s.Len())
	}
	return -1
}
