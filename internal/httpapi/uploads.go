package httpapi

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// uploadsPath is the base path of the upload resources.
const uploadsPath = "/api/etl/uploads"

// partHeader carries a part's SHA-256 (of its decompressed bytes).
const partHeader = "X-Part-SHA256"

// uploadIOTimeout is the read and write deadline of one part's request,
// and the write deadline of a submission, from when its handler starts: a
// part of up to 1 GiB arrives over slow links too, a submission reads the
// whole stored payload back to verify its digest, and the server's 2-minute
// timeouts are for the small requests.
const uploadIOTimeout = 30 * time.Minute

// registerUploads registers the upload routes (issue 32): create, read,
// parts, submit, abort. All are authenticated and owner-scoped like the
// job routes; every route that changes an upload is refused while the
// schema is incompatible.
func (a *api) registerUploads(route func(string, apiHandler), post func(string, apiHandler), allow func(path, methods string)) {
	gate := func(h apiHandler) apiHandler { return gateSchema(a.opts.SchemaGate, h) }
	post("POST "+uploadsPath, a.createUpload)
	allow(uploadsPath, "POST")
	route("GET "+uploadsPath+"/{id}", a.getUpload)
	route("DELETE "+uploadsPath+"/{id}", gate(a.abortUpload))
	allow(uploadsPath+"/{id}", "GET, HEAD, DELETE")
	route("PUT "+uploadsPath+"/{id}/parts/{partNumber}", gate(a.putPart))
	allow(uploadsPath+"/{id}/parts/{partNumber}", "PUT")
	post("POST "+uploadsPath+"/{id}/jobs", a.submitUpload)
	allow(uploadsPath+"/{id}/jobs", "POST")
}

// decodeStrict decodes body (empty means {}) into v: one JSON object, no
// unknown member, nothing after it.
func decodeStrict(body []byte, v any) bool {
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return false
	}
	_, err := d.Token()
	return err == io.EOF
}

// writeUpload writes an upload representation.
func (a *api) writeUpload(w http.ResponseWriter, status int, u pg.Upload) {
	writeJSON(w, status, a.opts.Service.NewUploadView(u))
}

// createUpload serves POST /api/etl/uploads: body {"format": "jsonl" |
// "json_array"} (empty or absent format: jsonl). 201 with Location.
func (a *api) createUpload(w http.ResponseWriter, r *http.Request, principal string) {
	body, release, ok := a.readBody(w, r)
	defer release()
	if !ok {
		return
	}
	var in struct {
		Format string `json:"format"`
	}
	if !decodeStrict(body, &in) {
		writeProblem(w, r, codes.InvalidJSON)
		return
	}
	u, err := a.opts.Service.CreateUpload(r.Context(), intake.CreateUploadRequest{Principal: principal, Format: in.Format})
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Location", uploadsPath+"/"+u.UploadID.String())
	a.writeUpload(w, http.StatusCreated, u)
}

// uploadID reads the path's upload id; a malformed one is an absent upload.
func uploadID(w http.ResponseWriter, r *http.Request) (uuid.UUID, bool) {
	id, ok := parseJobID(r.PathValue("id"))
	if !ok {
		writeProblem(w, r, codes.UploadNotFound)
	}
	return id, ok
}

// getUpload serves GET /api/etl/uploads/{id}: the upload with its
// committed parts (how a client resumes).
func (a *api) getUpload(w http.ResponseWriter, r *http.Request, principal string) {
	id, ok := uploadID(w, r)
	if !ok {
		return
	}
	u, err := a.opts.Service.GetUpload(r.Context(), principal, id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	a.writeUpload(w, http.StatusOK, u)
}

// abortUpload serves DELETE /api/etl/uploads/{id}: 204.
func (a *api) abortUpload(w http.ResponseWriter, r *http.Request, principal string) {
	id, ok := uploadID(w, r)
	if !ok {
		return
	}
	if err := a.opts.Service.AbortUpload(r.Context(), principal, id); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// parsePartNumber accepts the canonical decimal form of
// 1..pg.MaxUploadPartNumber: no sign, no leading zero.
func parsePartNumber(s string) (int64, bool) {
	if s == "" || len(s) > 5 || s[0] == '0' {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n, n <= pg.MaxUploadPartNumber
}

// partDigest reads the one X-Part-SHA256 field: 64 lowercase hex
// characters.
func partDigest(h http.Header) (string, bool) {
	vals := h.Values(partHeader)
	if len(vals) != 1 || len(vals[0]) != 64 {
		return "", false
	}
	for i := 0; i < 64; i++ {
		if c := vals[0][i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", false
		}
	}
	return vals[0], true
}

// errPartTooLarge is a part body (as sent) beyond the part limit.
var errPartTooLarge = errors.New("part body exceeds the part limit")

// cappedReader fails with errPartTooLarge once more than limit bytes were
// read from r.
type cappedReader struct {
	r     io.Reader
	limit int64
	n     int64
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if int64(len(p)) > c.limit-c.n+1 {
		p = p[:c.limit-c.n+1]
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.limit {
		return 0, errPartTooLarge
	}
	return n, err
}

// putPart serves PUT /api/etl/uploads/{id}/parts/{partNumber}: upload id (404),
// part number and X-Part-SHA256 (400 etl_invalid_upload_part),
// Content-Encoding (gzip or none, else 415), a declared length beyond the
// part limit (413 before reading), then the part streamed into the store:
// the body as sent and decompressed are both bounded by the part limit
// (413 as soon as either is passed), at most one batch of it held in
// memory, counted in the in-flight byte budget (503 etl_server_busy when
// it cannot hold one).
func (a *api) putPart(w http.ResponseWriter, r *http.Request, principal string) {
	id, ok := uploadID(w, r)
	if !ok {
		return
	}
	number, ok := parsePartNumber(r.PathValue("partNumber"))
	if !ok {
		writeProblem(w, r, codes.InvalidUploadPart)
		return
	}
	digest, ok := partDigest(r.Header)
	if !ok {
		writeProblem(w, r, codes.InvalidUploadPart)
		return
	}
	gzipped := false
	switch enc := r.Header.Values("Content-Encoding"); {
	case len(enc) == 0:
	case len(enc) == 1 && strings.EqualFold(strings.TrimSpace(enc[0]), "gzip"):
		gzipped = true
	case len(enc) == 1 && strings.EqualFold(strings.TrimSpace(enc[0]), "identity"):
	default:
		writeProblem(w, r, codes.UnsupportedMediaType)
		return
	}
	limit := a.opts.Service.UploadLimits().MaxPartBytes
	if r.ContentLength > limit {
		w.Header().Set("Connection", "close") // the unread body is not drained
		writeProblem(w, r, codes.UploadTooLarge)
		return
	}
	// One batch of the part is in memory at a time: hold it in the budget
	// for the whole request.
	held := int64(pg.UploadBatchBytes)
	if !a.budget.take(held) {
		writeBusy(w, r)
		return
	}
	defer a.budget.give(held)
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(uploadIOTimeout))
	_ = rc.SetWriteDeadline(time.Now().Add(uploadIOTimeout))

	var body io.Reader = &cappedReader{r: r.Body, limit: limit}
	if gzipped {
		zr, err := gzip.NewReader(body)
		if err != nil {
			if errors.Is(err, errPartTooLarge) {
				w.Header().Set("Connection", "close")
				writeProblem(w, r, codes.UploadTooLarge)
				return
			}
			writeProblem(w, r, codes.InvalidUploadPart)
			return
		}
		defer zr.Close()
		body = zr
	}
	part, err := a.opts.Service.PutUploadPart(r.Context(), intake.PutPartRequest{
		Principal: principal, UploadID: id, PartNumber: number, SHA256: digest, Body: body,
	})
	switch {
	case errors.Is(err, errPartTooLarge):
		w.Header().Set("Connection", "close")
		writeProblem(w, r, codes.UploadTooLarge)
		return
	case err != nil:
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, intake.NewUploadPartView(part))
}

// submitUpload serves POST /api/etl/uploads/{id}/jobs: upload id (404),
// key (400), body {"sha256": "<hex>", "maxBadRecords": n, "replayOf":
// "<job id>"} (400 etl_invalid_json), then the use case. 202 with Location
// and Idempotency-Replayed, the submit representation.
func (a *api) submitUpload(w http.ResponseWriter, r *http.Request, principal string) {
	id, ok := uploadID(w, r)
	if !ok {
		return
	}
	key, _, ok := parseIdempotencyKey(r.Header)
	if !ok {
		writeProblem(w, r, codes.InvalidIdempotencyKey)
		return
	}
	body, release, ok := a.readBody(w, r)
	defer release()
	if !ok {
		return
	}
	var in struct {
		SHA256        *string `json:"sha256"`
		MaxBadRecords int64   `json:"maxBadRecords"`
		ReplayOf      *string `json:"replayOf"`
	}
	if !decodeStrict(body, &in) || in.SHA256 == nil {
		writeProblem(w, r, codes.InvalidJSON)
		return
	}
	var replayOf uuid.UUID
	if in.ReplayOf != nil {
		if replayOf, ok = parseJobID(*in.ReplayOf); !ok {
			writeProblem(w, r, codes.InvalidJSON)
			return
		}
	}
	// Verifying the digest reads the whole stored payload (up to
	// MIGHTYETL_UPLOAD_MAX_BYTES) before the answer.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(uploadIOTimeout))
	res, err := a.opts.Service.SubmitUpload(r.Context(), intake.SubmitUploadRequest{
		Principal: principal, IdempotencyKey: key, UploadID: id, SHA256: *in.SHA256,
		MaxBadRecords: in.MaxBadRecords, ReplayOf: replayOf,
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeAccepted(w, jobsPath, res.Job, res.Replayed)
}
