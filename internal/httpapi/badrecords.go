package httpapi

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/intake"
)

// badRecordItem is one skipped record: its number and code, never its
// content.
type badRecordItem struct {
	RecordNumber int64  `json:"recordNumber"`
	ErrorCode    string `json:"errorCode"`
}

// badRecordsResponse is the body of a bad-records page.
type badRecordsResponse struct {
	Items      []badRecordItem `json:"items"`
	NextCursor string          `json:"nextCursor,omitempty"`
}

// badRecords serves GET /api/etl/jobs/{id}/bad-records?limit=&cursor=:
// the records a chunked job skipped under maxBadRecords, in record-number
// order, keyset paginated like the job list (limit 1..100, default 50; an
// opaque cursor bound to the caller and the job). Malformed, absent and
// foreign ids are 404 etl_job_not_found; a job without bad records has an
// empty page.
func (a *api) badRecords(w http.ResponseWriter, r *http.Request, principal string) {
	id, ok := parseJobID(r.PathValue("id"))
	if !ok {
		writeProblem(w, r, codes.JobNotFound)
		return
	}
	q := parseQuery(r.URL.RawQuery)
	req := intake.BadRecordsRequest{Principal: principal, JobID: id}
	if req.Limit, ok = q.pageLimit(w, r); !ok {
		return
	}
	if req.Cursor, ok = q.pageCursor(w, r); !ok {
		return
	}
	res, err := a.opts.Service.BadRecords(r.Context(), req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	body := badRecordsResponse{Items: make([]badRecordItem, len(res.Records)), NextCursor: res.NextCursor}
	for i, b := range res.Records {
		body.Items[i] = badRecordItem{RecordNumber: b.RecordNumber, ErrorCode: b.ErrorCode}
	}
	if res.NextCursor != "" {
		next := url.Values{}
		next.Set("cursor", res.NextCursor)
		if req.Limit != 0 {
			next.Set("limit", strconv.Itoa(req.Limit))
		}
		w.Header().Set("Link", "<"+jobsPath+"/"+id.String()+"/bad-records?"+next.Encode()+`>; rel="next"`)
	}
	writeJSON(w, http.StatusOK, body)
}

// pageLimit is a keyset page's limit parameter: 0 when absent, else the
// canonical 1..100 (parseLimit); a repeated, malformed or out-of-range one
// is answered 400 etl_invalid_job_page_limit and ok is false.
func (q query) pageLimit(w http.ResponseWriter, r *http.Request) (limit int, ok bool) {
	s, present, ok := q.single("limit")
	if ok && present {
		limit, ok = parseLimit(s)
	}
	if !ok {
		writeProblem(w, r, codes.InvalidPageLimit)
	}
	return limit, ok
}

// pageCursor is a keyset page's cursor parameter: "" when absent; a
// repeated, malformed or empty one is answered 400
// etl_invalid_job_page_cursor and ok is false.
func (q query) pageCursor(w http.ResponseWriter, r *http.Request) (cursor string, ok bool) {
	s, present, ok := q.single("cursor")
	if !ok || (present && s == "") {
		writeProblem(w, r, codes.InvalidPageCursor)
		return "", false
	}
	return s, true
}
