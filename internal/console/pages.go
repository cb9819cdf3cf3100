package console

import (
	"bytes"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/pg"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

func itoa(n int) string { return strconv.Itoa(n) }

var funcs = template.FuncMap{
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"tsp": func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"iso": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"str": func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	},
	"secs": func(f float64) string {
		d := time.Duration(f * float64(time.Second)).Round(time.Second)
		return d.String()
	},
	"until": func(t time.Time, now time.Time) string { return t.Sub(now).Round(time.Second).String() },
	"untilSecs": func(t *time.Time, now time.Time) string {
		if t == nil {
			return ""
		}
		return strconv.FormatFloat(t.Sub(now).Seconds(), 'f', 1, 64)
	},
	// short is "…" and a job id's last 8 characters: a UUIDv7 begins with
	// its creation time, so jobs created within about 65 s of each other
	// share their first 8; the random tail tells them apart.
	"short": func(id uuid.UUID) string { s := id.String(); return "…" + s[len(s)-8:] },
	"group": group,
	"bytes": bytesText,
	"lower": strings.ToLower,
	// breakable lets a narrow column wrap a code after its underscores.
	"breakable": func(s string) template.HTML {
		return template.HTML(strings.ReplaceAll(template.HTMLEscapeString(s), "_", "_<wbr>"))
	},
	"active": func(s string) bool { return s == pg.StatusPending || s == pg.StatusRunning },
	"code": func(j pg.OpsJob) string {
		if j.FailureCode != nil {
			return *j.FailureCode
		}
		if j.CancellationCode != nil {
			return *j.CancellationCode
		}
		return ""
	},
}

// Handler serves /console/ for the operator in the request context (set by
// the caller after authentication; without one every page is 403). Every
// response carries the console's security headers (SecureHeaders).
func (c *Console) Handler() http.Handler {
	pages := map[string]*template.Template{}
	for _, name := range []string{"overview", "jobs", "job", "workers", "audit", "confirm", "error"} {
		pages[name] = template.Must(template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html"))
	}
	assets, _ := fs.Sub(assetFS, "assets")
	mux := http.NewServeMux()
	h := &pageHandler{c: c, pages: pages}
	mux.HandleFunc("GET /console/{$}", h.overview)
	mux.HandleFunc("GET /console/jobs", h.jobs)
	mux.HandleFunc("GET /console/jobs/{id}", h.job)
	mux.HandleFunc("POST /console/jobs/{id}/cancel", h.cancel)
	mux.HandleFunc("POST /console/jobs/{id}/replay", h.replay)
	mux.HandleFunc("GET /console/bulk-cancel", h.bulkConfirm)
	mux.HandleFunc("POST /console/bulk-cancel", h.bulkCancel)
	mux.HandleFunc("GET /console/workers", h.workers)
	mux.HandleFunc("GET /console/audit", h.audit)
	mux.Handle("GET /console/assets/", http.StripPrefix("/console/assets/", http.FileServerFS(assets)))
	mux.HandleFunc("/console/", func(w http.ResponseWriter, r *http.Request) {
		h.error(w, r, http.StatusNotFound, "Not found", "No such console page.")
	})
	return SecureHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := operatorFrom(r.Context()); !ok {
			h.error(w, r, http.StatusForbidden, "Forbidden", "The console is for operators.")
			return
		}
		mux.ServeHTTP(w, r)
	}))
}

// RenderError writes a console error page (used by the caller for 401 and
// 403 before the console runs) with the console's security headers. An
// error page shows no notice.
func (c *Console) RenderError(w http.ResponseWriter, r *http.Request, status int, title, msg string) {
	SetSecurityHeaders(w.Header())
	t := template.Must(template.New("error").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/error.html"))
	(&pageHandler{c: c, pages: map[string]*template.Template{"error": t}}).error(w, r, status, title, msg)
}

type pageHandler struct {
	c     *Console
	pages map[string]*template.Template
}

// view is what every template gets.
type view struct {
	Title string
	Nav   string
	Token string
	// Notice is the fixed text of the page's notice code (noticeText),
	// never text from the request.
	Notice string
	Data   any
}

func (h *pageHandler) render(w http.ResponseWriter, r *http.Request, status int, page, title string, data any) {
	op, _ := operatorFrom(r.Context())
	v := view{Title: title, Nav: page, Data: data}
	if page != "error" {
		v.Notice = noticeText(r.URL.Query(), h.c.opts.BulkCancelCap)
	}
	if op.ScopeHash != "" {
		v.Token = h.c.CSRFToken(op)
	}
	var buf bytes.Buffer
	if err := h.pages[page].ExecuteTemplate(&buf, "layout", v); err != nil {
		h.c.opts.Logger.LogAttrs(r.Context(), slog.LevelError, "console render", slog.String("page", page))
		http.Error(w, "render error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func (h *pageHandler) error(w http.ResponseWriter, r *http.Request, status int, title, msg string) {
	h.render(w, r, status, "error", title, struct{ Status, Message string }{strconv.Itoa(status) + " " + title, msg})
}

func (h *pageHandler) dbError(w http.ResponseWriter, r *http.Request, err error) {
	h.c.opts.Logger.LogAttrs(r.Context(), slog.LevelError, "console read", slog.String("route", r.Pattern),
		slog.String("error_class", pg.ErrorClass(err)))
	h.error(w, r, http.StatusServiceUnavailable, "Unavailable", "The database did not answer; reload to retry.")
}

func (h *pageHandler) notFound(w http.ResponseWriter, r *http.Request) {
	h.error(w, r, http.StatusNotFound, "Not found", "No such job.")
}

// pathJobID is the job id of the path; a malformed one is answered 404.
func (h *pageHandler) pathJobID(w http.ResponseWriter, r *http.Request) (uuid.UUID, bool) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		h.notFound(w, r)
		return uuid.Nil, false
	}
	return id, true
}

// redirectToJob sends the browser to the job's page, showing the notice
// of code.
func redirectToJob(w http.ResponseWriter, r *http.Request, id uuid.UUID, code string) {
	redirectWithNotice(w, r, "/console/jobs/"+id.String(), code)
}

func (h *pageHandler) overview(w http.ResponseWriter, r *http.Request) {
	o, err := h.c.Overview(r.Context())
	if err != nil {
		h.dbError(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "overview", "Overview", struct {
		Overview
		Chart template.HTML
	}{o, rateChart(o.Rates, o.DatabaseNow, o.nextSample, h.c.opts.SampleEvery)})
}

type jobsView struct {
	Filter   Filter
	Page     pg.OpsPage
	NextURL  string
	FirstURL string
	LiveURL  string
	BulkURL  string
	Cap      int
	States   []string
	// Priorities are the priority filter's choices.
	Priorities []int
}

func (h *pageHandler) jobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if id := strings.TrimSpace(q.Get("id")); id != "" {
		if u, err := uuid.Parse(id); err == nil {
			http.Redirect(w, r, "/console/jobs/"+u.String(), http.StatusSeeOther)
			return
		}
		h.error(w, r, http.StatusBadRequest, "Bad request", "A job id is a UUID.")
		return
	}
	f, err := ParseFilter(q)
	if err != nil {
		h.error(w, r, http.StatusBadRequest, "Bad request", "The filter has an unknown state, kind, code, priority or time.")
		return
	}
	page, err := h.c.Jobs(r.Context(), f)
	if err != nil {
		h.dbError(w, r, err)
		return
	}
	v := jobsView{Filter: f, Page: page, Cap: h.c.opts.BulkCancelCap,
		LiveURL: "/api/ops/jobs?" + f.Query(false).Encode(), BulkURL: "/console/bulk-cancel?" + f.Query(false).Encode(),
		States:     []string{pg.StatusPending, pg.StatusRunning, pg.StatusSucceeded, pg.StatusFailed, pg.StatusCancelled},
		Priorities: []int{1, 2, 3, 4}}
	if page.Next != nil {
		nq := f.Query(false)
		nq.Set("before", page.Next.String())
		v.NextURL = "/console/jobs?" + nq.Encode()
	}
	if f.Before != nil {
		v.FirstURL = "/console/jobs?" + f.Query(false).Encode()
	}
	h.render(w, r, http.StatusOK, "jobs", "Jobs", v)
}

func (h *pageHandler) job(w http.ResponseWriter, r *http.Request) {
	id, ok := h.pathJobID(w, r)
	if !ok {
		return
	}
	d, err := h.c.Detail(r.Context(), id)
	if errors.Is(err, pg.ErrNotFound) {
		h.notFound(w, r)
		return
	}
	if err != nil {
		h.dbError(w, r, err)
		return
	}
	v := jobView{JobDetail: d, ReplayEnabled: h.c.ReplayEnabled(), ReplayKey: ReplayKey(), MaxPayloadBytes: h.c.opts.MaxPayloadBytes}
	if d.Progress != nil {
		pv := newProgressView(*d.Progress, d.Status, parseSeen(r.URL.Query().Get(seenParam)))
		v.LoadProgress = &pv
	}
	h.render(w, r, http.StatusOK, "job", "Job "+id.String(), v)
}

// jobView is the detail page: the job and, for a FAILED or CANCELLED job,
// the replay form's key (drawn per rendering; see ReplayKey); for a
// chunked job its load's progress.
type jobView struct {
	JobDetail
	ReplayEnabled   bool
	ReplayKey       string
	MaxPayloadBytes int64
	LoadProgress    *progressView
}

// NotBefore is the job's notBefore, as the owner's API shows it: its
// available_at while it is PENDING and that time is later than the
// database clock at the read (a scheduled job, or a retry waiting out its
// backoff); nil otherwise.
func (v jobView) NotBefore() *time.Time {
	if v.Status != pg.StatusPending || !v.AvailableAt.After(v.DatabaseNow) {
		return nil
	}
	t := v.AvailableAt
	return &t
}

// RecordsNote is what the page says in place of a record count when there
// is none (RecordCount nil): a terminal job keeps no payload (the worker's
// finish and every cancellation clear it); a PENDING or RUNNING job holds
// one, and a diagnostic job's has no records when it was submitted without
// the optional "records" member (or with null).
func (v jobView) RecordsNote() string {
	switch {
	case v.Kind == pg.KindETLChunked:
		return "see Progress: a large job's payload is stored in chunks, not in the job"
	case v.Status != pg.StatusPending && v.Status != pg.StatusRunning:
		return "not kept: a terminal job keeps no payload, only its digest"
	case v.Kind == pg.KindDiagnostic:
		return "none: a diagnostic job submitted without records"
	}
	return "not known: the payload is not a JSON array of records"
}

// BodyShape names the original request body the replay form asks for: the
// JSON array of records of an etl_records job, the object of a diagnostic
// job (etl.ParseDiagnostic).
func (v jobView) BodyShape() string {
	if v.Kind == pg.KindDiagnostic {
		return `a JSON object {"durationMillis", "records", "failWith"}, as submitted`
	}
	return "a JSON array of records, as submitted"
}

func (h *pageHandler) workers(w http.ResponseWriter, r *http.Request) {
	f, err := h.c.Fleet(r.Context())
	if err != nil {
		h.dbError(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "workers", "Workers", f)
}

// sameOrigin is the CSRF origin check of a POST: an Origin header, when
// sent, must name this host, and a Sec-Fetch-Site header, when sent, must
// be same-origin. Browsers send at least one of them on every form POST.
func sameOrigin(r *http.Request) bool {
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return false
		}
	} else if r.Header.Get("Sec-Fetch-Site") == "" {
		return false
	}
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
		return false
	}
	return true
}

// checkPost applies the CSRF rules: same origin and the operator's token.
func (h *pageHandler) checkPost(w http.ResponseWriter, r *http.Request) (Operator, bool) {
	return h.checkPostLimit(w, r, 16<<10)
}

// checkPostLimit is checkPost for a form of at most limit bytes.
func (h *pageHandler) checkPostLimit(w http.ResponseWriter, r *http.Request, limit int64) (Operator, bool) {
	op, _ := operatorFrom(r.Context())
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	if !sameOrigin(r) || r.ParseForm() != nil || !h.c.validToken(op, r.PostForm.Get("csrf")) {
		h.c.opts.Logger.LogAttrs(r.Context(), slog.LevelWarn, "operator action", slog.String("action", "refused"),
			slog.String("outcome", "csrf"))
		h.error(w, r, http.StatusForbidden, "Forbidden", "The form was not sent from this console; reload the page and try again.")
		return Operator{}, false
	}
	return op, true
}

func (h *pageHandler) cancel(w http.ResponseWriter, r *http.Request) {
	op, ok := h.checkPost(w, r)
	if !ok {
		return
	}
	id, ok := h.pathJobID(w, r)
	if !ok {
		return
	}
	res, err := h.c.Cancel(r.Context(), op, id)
	if errors.Is(err, pg.ErrNotFound) {
		h.notFound(w, r)
		return
	}
	if err != nil {
		h.dbError(w, r, err)
		return
	}
	notice := noticeCancelled
	if !res.Cancelled {
		notice = noticeNotCancelled
	}
	redirectToJob(w, r, id, notice)
}

// replay serves the replay form of a FAILED or CANCELLED job's detail
// page: CSRF checks, the confirmation box, the body within the payload
// limit, then Console.Replay; success redirects to the new job. A textarea
// submits its line breaks as CRLF (HTML's form encoding), so a body with
// CRLF whose digest does not match is tried once more with LF line breaks;
// a refused attempt writes nothing, so both run under the form's one key.
func (h *pageHandler) replay(w http.ResponseWriter, r *http.Request) {
	// URL-encoding can triple a body's size; the body itself is checked
	// against the payload limit below.
	op, ok := h.checkPostLimit(w, r, 3*h.c.opts.MaxPayloadBytes+16<<10)
	if !ok {
		return
	}
	id, ok := h.pathJobID(w, r)
	if !ok {
		return
	}
	if r.PostForm.Get("confirm") != "yes" {
		h.error(w, r, http.StatusBadRequest, "Bad request", "Tick the confirmation box to replay the job.")
		return
	}
	body := r.PostForm.Get("body")
	if int64(len(body)) > h.c.opts.MaxPayloadBytes {
		h.error(w, r, http.StatusRequestEntityTooLarge, "Too large", "The body is larger than the payload limit.")
		return
	}
	key := r.PostForm.Get("key")
	res, err := h.c.Replay(r.Context(), op, id, key, []byte(body))
	if errors.Is(err, intake.ErrReplayPayloadMismatch) && strings.Contains(body, "\r\n") {
		res, err = h.c.Replay(r.Context(), op, id, key, []byte(strings.ReplaceAll(body, "\r\n", "\n")))
	}
	if err != nil {
		status, msg := replayRefusal(err)
		if status == 0 {
			h.dbError(w, r, err)
			return
		}
		h.error(w, r, status, http.StatusText(status), msg)
		return
	}
	notice := noticeReplayed
	if res.Replayed {
		notice = noticeReplayRepeated
	}
	redirectToJob(w, r, res.Job.JobID, notice)
}

// replayRefusal is the status and message of a refused replay, or 0 for a
// database failure.
func replayRefusal(err error) (int, string) {
	switch intake.CodeOf(err) {
	case codes.JobNotFound:
		return http.StatusNotFound, "No such job."
	case codes.ReplayKeyRequired:
		return http.StatusBadRequest, "The form has no replay key; reload the job page and try again."
	case codes.ReplayPayloadMismatch:
		return http.StatusUnprocessableEntity, "The body is not the job's original body (its SHA-256 differs from the stored digest). Paste the exact bytes the owner submitted."
	case codes.ReplayKeyReused:
		return http.StatusUnprocessableEntity, "This form already replayed the job with another body; reload the job page to start a new replay."
	case codes.ReplaySourceActive:
		return http.StatusConflict, "The job is PENDING or RUNNING; only FAILED or CANCELLED jobs can be replayed."
	case codes.ReplaySourceSucceeded:
		return http.StatusConflict, "The job SUCCEEDED; there is nothing to replay."
	case codes.ReplayGenerationExhausted:
		return http.StatusConflict, "The job is the last generation of its replay chain (100); it cannot be replayed."
	case codes.ReplayRequiresUpload:
		return http.StatusConflict, "The job is a large job: this form cannot replay it. Its owner replays it by uploading the payload again and submitting the upload with replayOf."
	}
	return 0, ""
}

type confirmView struct {
	Filter  Filter
	Query   string
	BackURL string
	Count   int
	Capped  bool
	Cap     int
}

func (h *pageHandler) bulkConfirm(w http.ResponseWriter, r *http.Request) {
	f, err := ParseFilter(r.URL.Query())
	if err != nil {
		h.error(w, r, http.StatusBadRequest, "Bad request", "The filter has an unknown state, kind, code, priority or time.")
		return
	}
	plan, err := h.c.PlanBulkCancel(r.Context(), f)
	if h.bulkRefused(w, r, err) {
		return
	}
	if err != nil {
		h.dbError(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "confirm", "Confirm bulk cancel", confirmView{Filter: f, Query: f.Query(false).Encode(),
		BackURL: "/console/jobs?" + f.Query(false).Encode(),
		Count:   len(plan.Jobs), Capped: plan.Capped, Cap: h.c.opts.BulkCancelCap})
}

// bulkRefused answers 400 when err refuses the bulk filter.
func (h *pageHandler) bulkRefused(w http.ResponseWriter, r *http.Request, err error) bool {
	switch {
	case errors.Is(err, errBulkNeedsActiveState):
		h.error(w, r, http.StatusBadRequest, "Bad request", "Bulk cancel needs the state filter PENDING or RUNNING.")
	case errors.Is(err, errBulkPriority):
		h.error(w, r, http.StatusBadRequest, "Bad request", "Bulk cancel does not filter by priority; clear the priority filter.")
	default:
		return false
	}
	return true
}

func (h *pageHandler) bulkCancel(w http.ResponseWriter, r *http.Request) {
	op, ok := h.checkPost(w, r)
	if !ok {
		return
	}
	q, err := url.ParseQuery(r.PostForm.Get("filter"))
	if err != nil {
		h.error(w, r, http.StatusBadRequest, "Bad request", "The filter is malformed.")
		return
	}
	f, err := ParseFilter(q)
	confirmed, cerr := strconv.Atoi(r.PostForm.Get("count"))
	if err != nil || cerr != nil || confirmed < 0 || confirmed > h.c.opts.BulkCancelCap {
		h.error(w, r, http.StatusBadRequest, "Bad request", "The filter or the confirmed count is invalid.")
		return
	}
	n, err := h.c.BulkCancel(r.Context(), op, f, confirmed)
	if h.bulkRefused(w, r, err) {
		return
	}
	if err != nil {
		h.dbError(w, r, err)
		return
	}
	q = f.Query(false)
	q.Set(noticeBulkCountParam, strconv.Itoa(n))
	redirectWithNotice(w, r, "/console/jobs?"+q.Encode(), noticeBulkCancelled)
}
