package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// jobsPath is the base path of the job resources.
const jobsPath = "/api/etl/jobs"

// submitResponse is the body of 202 Accepted (new or replayed submission).
// Priority and NotBefore are the job's (intake.JobView's rules); both are
// omitted when the use case did not read them (an operator's replay).
type submitResponse struct {
	JobRecordID string `json:"jobRecordId"`
	JobStatus   string `json:"jobStatus"`
	StatusURL   string `json:"statusUrl"`
	Priority    int    `json:"priority,omitempty"`
	NotBefore   string `json:"notBefore,omitempty"`
}

// listResponse is the body of a list page.
type listResponse struct {
	Jobs       []intake.JobView `json:"jobs"`
	NextCursor string           `json:"nextCursor,omitempty"`
}

// Header values every response of a kind shares. net/http only reads a
// header's value slices, and this package never changes one in place (Set,
// Add and Del replace the slice), so one slice serves every response without
// an allocation each.
var (
	noStoreValue     = []string{"no-store"}
	jsonContentValue = []string{"application/json"}
	replayedValues   = [2][]string{{"false"}, {"true"}}
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status, body = http.StatusInternalServerError, []byte(`{}`)
	}
	writeJSONBody(w, status, body)
}

// writeJSONBody writes body, already JSON, as application/json.
func writeJSONBody(w http.ResponseWriter, status int, body []byte) {
	w.Header()["Content-Type"] = jsonContentValue
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// setReplayed sets Idempotency-Replayed: true or false.
func setReplayed(h http.Header, replayed bool) {
	v := 0
	if replayed {
		v = 1
	}
	h["Idempotency-Replayed"] = replayedValues[v]
}

// readBody reads the whole body within the payload limit and the
// in-flight byte budget. A declared Content-Length above the limit is
// refused before anything is read; a streamed (chunked) body is cut after
// limit+1 bytes; the buffer grows only as bytes arrive. Every byte read is
// held in the budget until the caller calls release (always safe, also
// after a failure); a body that does not fit the budget is 503
// etl_server_busy with Retry-After. On failure it writes the problem and
// returns ok false.
func (a *api) readBody(w http.ResponseWriter, r *http.Request) (body []byte, release func(), ok bool) {
	limit := a.opts.MaxPayloadBytes
	if r.ContentLength > limit {
		w.Header().Set("Connection", "close") // the unread body is not drained
		writeProblem(w, r, codes.PayloadTooLarge)
		return nil, func() {}, false
	}
	br := &budgetReader{r: r.Body, budget: a.budget}
	body, err := readLimited(br, limit, r.ContentLength)
	if err != nil {
		br.release()
		switch {
		case errors.Is(err, errTooLarge):
			w.Header().Set("Connection", "close")
			writeProblem(w, r, codes.PayloadTooLarge)
		case errors.Is(err, errBusy):
			writeBusy(w, r)
		default:
			writeProblem(w, r, codes.InvalidJSON) // truncated or broken body
		}
		return nil, func() {}, false
	}
	return body, br.release, true
}

// submit serves POST /api/etl/jobs (kind "") and POST
// /api/etl/diagnostic-jobs (kind "diagnostic"): key, then the schedule
// headers, then size, then the use case. 202 with Location and
// Idempotency-Replayed for new and replayed jobs alike.
func (a *api) submit(kind string) apiHandler {
	if kind == "" {
		kind = pg.KindETLRecords
	}
	return func(w http.ResponseWriter, r *http.Request, principal string) {
		key, _, ok := parseIdempotencyKey(r.Header)
		if !ok {
			writeProblem(w, r, codes.InvalidIdempotencyKey)
			return
		}
		schedule, ok := a.readSchedule(w, r, true)
		if !ok {
			return
		}
		body, release, ok := a.readBody(w, r)
		defer release()
		if !ok {
			return
		}
		res, err := a.opts.Service.Submit(r.Context(), intake.SubmitRequest{
			Principal: principal, IdempotencyKey: key, Body: body, Kind: kind, Schedule: schedule,
		})
		if err != nil {
			writeError(w, r, err)
			return
		}
		writeAccepted(w, jobsPath, res.Job, res.Replayed)
	}
}

// readSchedule reads the Mightyetl-Priority and Mightyetl-Not-Before
// headers (intake.ParseSchedule). On a malformed one it writes its problem,
// counts the rejection when submission is true (a replay's is not a
// submission), and returns ok false.
func (a *api) readSchedule(w http.ResponseWriter, r *http.Request, submission bool) (intake.Schedule, bool) {
	s, err := intake.ParseSchedule(r.Header.Values(intake.PriorityHeader), r.Header.Values(intake.NotBeforeHeader))
	if err != nil {
		if submission {
			a.opts.Service.RejectSubmission(err)
		}
		writeError(w, r, err)
		return intake.Schedule{}, false
	}
	return s, true
}

// writeAccepted answers 202 for a new (replayed false) or replayed job of
// a submission or a replay: Location (base/{id}), Idempotency-Replayed and
// the submit body.
func writeAccepted(w http.ResponseWriter, base string, job pg.Job, replayed bool) {
	id := job.JobID.String()
	loc := base + "/" + id
	h := w.Header()
	h["Location"] = []string{loc}
	setReplayed(h, replayed)
	priority, notBefore := intake.ScheduleView(job)
	if !plainJSONString(base) || !plainJSONString(job.Status) {
		writeJSON(w, http.StatusAccepted, submitResponse{JobRecordID: id, JobStatus: job.Status, StatusURL: loc,
			Priority: priority, NotBefore: notBefore})
		return
	}
	// What json.Marshal makes of submitResponse, without reflection: no
	// value needs an escape (a notBefore is digits, '-', ':', '.', 'T', 'Z').
	body := make([]byte, 0, len(`{"jobRecordId":"","jobStatus":"","statusUrl":"","priority":0,"notBefore":""}`)+
		len(id)+len(job.Status)+len(loc)+len(notBefore))
	body = append(body, `{"jobRecordId":"`...)
	body = append(body, id...)
	body = append(body, `","jobStatus":"`...)
	body = append(body, job.Status...)
	body = append(body, `","statusUrl":"`...)
	body = append(body, loc...)
	body = append(body, '"')
	if priority != 0 {
		body = append(body, `,"priority":`...)
		body = strconv.AppendInt(body, int64(priority), 10)
	}
	if notBefore != "" {
		body = append(body, `,"notBefore":"`...)
		body = append(body, notBefore...)
		body = append(body, '"')
	}
	body = append(body, '}')
	writeJSONBody(w, http.StatusAccepted, body)
}

// plainJSONString reports whether json.Marshal writes s as it is between
// quotes: printable ASCII without '"', '\\', '<', '>' or '&'.
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// parseJobID accepts only the canonical 36-character UUID form (either
// case); anything else is treated as an absent job.
func parseJobID(s string) (uuid.UUID, bool) {
	if len(s) != 36 {
		return uuid.Nil, false
	}
	id, err := uuid.Parse(s)
	return id, err == nil
}

// writeJob writes a job representation with its validators: ETag always,
// Retry-After only while the job is PENDING or RUNNING.
func (a *api) writeJob(w http.ResponseWriter, status int, v intake.JobView) {
	h := w.Header()
	h.Set("ETag", v.ETag())
	if v.Active() {
		h.Set("Retry-After", a.retryAfter)
	}
	writeJSON(w, status, v)
}

// status serves GET /api/etl/jobs/{id}. If-None-Match is evaluated only
// after the owner check, so a foreign job is 404 even for "*".
func (a *api) status(w http.ResponseWriter, r *http.Request, principal string) {
	id, ok := parseJobID(r.PathValue("id"))
	if !ok {
		writeProblem(w, r, codes.JobNotFound)
		return
	}
	job, err := a.opts.Service.Status(r.Context(), principal, id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	v := intake.NewJobView(job)
	if ifNoneMatch(r.Header, v.ETag()) {
		h := w.Header()
		h.Set("ETag", v.ETag())
		if v.Active() {
			h.Set("Retry-After", a.retryAfter)
		}
		w.WriteHeader(http.StatusNotModified)
		return
	}
	a.writeJob(w, http.StatusOK, v)
}

// query is a strictly parsed query string: each name's values, and the
// names whose value could not be decoded.
type query struct {
	values url.Values
	broken map[string]bool
}

// parseQuery splits raw on '&' and decodes each pair. Unlike url.ParseQuery
// it remembers which parameter was malformed (a bad escape in a cursor is a
// bad cursor, not an absent one); a pair whose name cannot be decoded is
// ignored like any unknown parameter.
func parseQuery(raw string) query {
	q := query{values: url.Values{}, broken: map[string]bool{}}
	for _, pair := range strings.Split(raw, "&") {
		if pair == "" {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		name, err := url.QueryUnescape(k)
		if err != nil {
			continue
		}
		value, err := url.QueryUnescape(v)
		if err != nil {
			q.broken[name] = true
			continue
		}
		q.values[name] = append(q.values[name], value)
	}
	return q
}

// single returns the only value of name: present false when absent, ok
// false when repeated or malformed.
func (q query) single(name string) (value string, present, ok bool) {
	if q.broken[name] {
		return "", true, false
	}
	vals, present := q.values[name]
	if !present {
		return "", false, true
	}
	if len(vals) != 1 {
		return "", true, false
	}
	return vals[0], true, true
}

// parseLimit accepts the canonical decimal form of 1..100: no sign, no
// leading zero, no white space.
func parseLimit(s string) (int, bool) {
	if s == "" || len(s) > 3 || s[0] == '0' {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, n >= 1 && n <= intake.MaxListLimit
}

// list serves GET /api/etl/jobs?limit=&cursor=&status=&priority=.
func (a *api) list(w http.ResponseWriter, r *http.Request, principal string) {
	q := parseQuery(r.URL.RawQuery)
	req := intake.ListRequest{Principal: principal}
	var ok bool
	if req.Limit, ok = q.pageLimit(w, r); !ok {
		return
	}
	if s, present, ok := q.single("status"); !ok || (present && !intake.ValidStatus(s)) {
		writeProblem(w, r, codes.InvalidStatusFilter)
		return
	} else {
		req.Status = s
	}
	if s, present, ok := q.single("priority"); !ok || (present && !validPriorityFilter(s)) {
		writeProblem(w, r, codes.InvalidPriorityFilter)
		return
	} else if present {
		req.Priority = int(s[0] - '0')
	}
	if req.Cursor, ok = q.pageCursor(w, r); !ok {
		return
	}
	res, err := a.opts.Service.List(r.Context(), req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	body := listResponse{Jobs: make([]intake.JobView, len(res.Jobs)), NextCursor: res.NextCursor}
	for i, j := range res.Jobs {
		body.Jobs[i] = intake.NewJobView(j)
	}
	if res.NextCursor != "" {
		next := url.Values{}
		next.Set("limit", strconv.Itoa(res.Limit))
		next.Set("cursor", res.NextCursor)
		if req.Status != "" {
			next.Set("status", req.Status)
		}
		if req.Priority != 0 {
			next.Set("priority", strconv.Itoa(req.Priority))
		}
		w.Header().Set("Link", "<"+jobsPath+"?"+next.Encode()+`>; rel="next"`)
	}
	writeJSON(w, http.StatusOK, body)
}

// validPriorityFilter reports whether s is a priority filter: one digit
// 1..4.
func validPriorityFilter(s string) bool {
	return len(s) == 1 && s[0] >= '0'+pg.HighestPriority && s[0] <= '0'+pg.LowestPriority
}

// cancel serves POST /api/etl/jobs/{id}/cancellation: id (404), then key
// (400), then the one conditional UPDATE.
func (a *api) cancel(w http.ResponseWriter, r *http.Request, principal string) {
	id, ok := parseJobID(r.PathValue("id"))
	if !ok {
		a.opts.Service.CountCancelNotFound()
		writeProblem(w, r, codes.JobNotFound)
		return
	}
	key, _, ok := parseIdempotencyKey(r.Header)
	if !ok {
		writeProblem(w, r, codes.CancellationKeyRequired)
		return
	}
	res, err := a.opts.Service.Cancel(r.Context(), intake.CancelRequest{
		Principal: principal, JobID: id, IdempotencyKey: key,
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	setReplayed(w.Header(), res.Replayed)
	a.writeJob(w, http.StatusOK, intake.NewJobView(res.Job))
}

// replay serves POST /api/etl/jobs/{id}/replays: id (404), then key (400),
// then size (413), then the schedule headers (400; absent: the source's
// priority, at once), then the use case. The body is not parsed: it must be
// the byte-identical original payload, which the use case checks against the
// source's digest. 202 with Location and Idempotency-Replayed, shaped like
// submit, for new and replayed replays alike.
func (a *api) replay(w http.ResponseWriter, r *http.Request, principal string) {
	id, key, body, release, ok := a.readReplay(w, r)
	defer release()
	if !ok {
		return
	}
	schedule, ok := a.readSchedule(w, r, false)
	if !ok {
		return
	}
	res, err := a.opts.Service.Replay(r.Context(), intake.ReplayRequest{
		Principal: principal, IdempotencyKey: key, JobID: id, Body: body, Schedule: schedule,
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeAccepted(w, jobsPath, res.Job, res.Replayed)
}

// readReplay reads a replay request, the owner's or an operator's: the job
// id from the path (404), then the required Idempotency-Key (400), then the
// body (413). When ok is false the problem is written. release is never nil;
// call it when done with body.
func (a *api) readReplay(w http.ResponseWriter, r *http.Request) (id uuid.UUID, key string, body []byte, release func(), ok bool) {
	if id, ok = parseJobID(r.PathValue("id")); !ok {
		writeProblem(w, r, codes.JobNotFound)
		return uuid.Nil, "", nil, func() {}, false
	}
	if key, _, ok = parseIdempotencyKey(r.Header); !ok {
		writeProblem(w, r, codes.ReplayKeyRequired)
		return uuid.Nil, "", nil, func() {}, false
	}
	body, release, ok = a.readBody(w, r)
	return id, key, body, release, ok
}

// process serves POST /api/etl/process: 200 text/plain "Processed: <id>"
// lines; with an Idempotency-Key, the ledger replays or rejects reuse.
func (a *api) process(w http.ResponseWriter, r *http.Request, principal string) {
	key, present, ok := parseIdempotencyKey(r.Header)
	if present && !ok {
		writeProblem(w, r, codes.InvalidIdempotencyKey)
		return
	}
	body, release, ok := a.readBody(w, r)
	defer release()
	if !ok {
		return
	}
	// A bounded share of the request pool: however many /process calls
	// arrive, the rest of the pool stays free for status, list, cancel and
	// the group commits. Waiting ends with the request.
	select {
	case a.processSlots <- struct{}{}:
		defer func() { <-a.processSlots }()
	case <-r.Context().Done():
		writeProblem(w, r, codes.TargetUnavailable)
		return
	}
	res, err := a.opts.Service.Process(r.Context(), intake.ProcessRequest{
		Principal: principal, IdempotencyKey: key, Body: body,
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	if present {
		setReplayed(h, res.Replayed)
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(res.ResponseText))
}
