package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/console"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// operatorOf authenticates r and decides whether its principal is an
// operator. status is 0 for an operator, else 401 or 403 (or a throttle
// error for the caller to answer).
func (a *api) operatorOf(r *http.Request) (console.Operator, int, error) {
	principal, operator, err := a.opts.Operators.Authenticate(a.opts.Authenticator, r)
	if err != nil {
		return console.Operator{}, http.StatusUnauthorized, err
	}
	if !operator {
		return console.Operator{}, http.StatusForbidden, nil
	}
	return console.Operator{ScopeHash: auth.ScopeHash(a.opts.PrincipalHashKey, principal)}, 0, nil
}

// consolePages serves /console/ to operators: no or bad credentials get a
// 401 page with the authenticator's challenge (Basic prompts the browser),
// other principals a 403 page. Every response, refusals included, carries
// the console's security headers (console.SecureHeaders).
func (a *api) consolePages() http.Handler {
	pages := a.opts.Console.Handler()
	return console.SecureHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op, status, err := a.operatorOf(r)
		if throttled := (*auth.ThrottleError)(nil); errors.As(err, &throttled) {
			writeAuthThrottled(w, r, throttled)
			return
		}
		switch status {
		case http.StatusUnauthorized:
			w.Header().Set("WWW-Authenticate", a.opts.Authenticator.Challenge())
			a.opts.Console.RenderError(w, r, status, "Unauthorized", "Sign in with operator credentials.")
			return
		case http.StatusForbidden:
			a.opts.Console.RenderError(w, r, status, "Forbidden", "The console is for operators; these credentials are not an operator's.")
			return
		}
		pages.ServeHTTP(w, r.WithContext(console.WithOperator(r.Context(), op)))
	}))
}

// opsHandler is an /api/ops/ handler, called for an operator.
type opsHandler func(w http.ResponseWriter, r *http.Request, op console.Operator)

// operatorRoute authenticates like every /api route (401 problem with the
// challenge) and then requires an operator (403 etl_operator_required).
func (a *api) operatorRoute(h opsHandler) http.Handler {
	return a.authenticated(func(w http.ResponseWriter, r *http.Request, _ string) {
		op, status, _ := a.operatorOf(r)
		if status != 0 {
			writeProblem(w, r, codes.OperatorRequired)
			return
		}
		h(w, r, op)
	})
}

func writeOpsJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// opsJob is a job in the operator JSON.
type opsJob struct {
	JobRecordID  string    `json:"jobRecordId"`
	JobStatus    string    `json:"jobStatus"`
	JobKind      string    `json:"jobKind"`
	Owner        string    `json:"owner"`
	Priority     int       `json:"priority"`
	AttemptCount int       `json:"attemptCount"`
	MaxAttempts  int       `json:"maxAttempts"`
	Code         string    `json:"code,omitempty"`
	CreatedAt    time.Time `json:"createdAt"`
	UpdatedAt    time.Time `json:"updatedAt"`
	AvailableAt  time.Time `json:"availableAt"`
}

func toOpsJob(j pg.OpsJob) opsJob {
	o := opsJob{JobRecordID: j.JobID.String(), JobStatus: j.Status, JobKind: j.Kind, Owner: j.Owner,
		Priority: j.Priority, AttemptCount: j.AttemptCount, MaxAttempts: j.MaxAttempts, CreatedAt: j.CreatedAt.UTC(),
		UpdatedAt: j.UpdatedAt.UTC(), AvailableAt: j.AvailableAt.UTC()}
	switch {
	case j.FailureCode != nil:
		o.Code = *j.FailureCode
	case j.CancellationCode != nil:
		o.Code = *j.CancellationCode
	}
	return o
}

func (a *api) opsOverview(w http.ResponseWriter, r *http.Request, _ console.Operator) {
	o, err := a.opts.Console.Overview(r.Context())
	if err != nil {
		writeProblem(w, r, codes.TargetUnavailable)
		return
	}
	if o.Outcomes == nil {
		o.Outcomes = []console.Outcome{}
	}
	if o.Rates == nil {
		o.Rates = []console.RatePoint{}
	}
	writeOpsJSON(w, o)
}

func (a *api) opsJobs(w http.ResponseWriter, r *http.Request, _ console.Operator) {
	f, err := console.ParseFilter(r.URL.Query())
	if err != nil {
		writeProblem(w, r, codes.OpsInvalidFilter)
		return
	}
	page, err := a.opts.Console.Jobs(r.Context(), f)
	if err != nil {
		writeProblem(w, r, codes.TargetUnavailable)
		return
	}
	out := struct {
		Jobs       []opsJob `json:"jobs"`
		NextBefore string   `json:"nextBefore,omitempty"`
		Scanned    int      `json:"scanned"`
		Capped     bool     `json:"capped"`
	}{Jobs: []opsJob{}, Scanned: page.Scanned, Capped: page.Capped}
	for _, j := range page.Jobs {
		out.Jobs = append(out.Jobs, toOpsJob(j))
	}
	if page.Next != nil {
		out.NextBefore = page.Next.String()
	}
	writeOpsJSON(w, out)
}

func (a *api) opsJob(w http.ResponseWriter, r *http.Request, _ console.Operator) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		writeProblem(w, r, codes.JobNotFound)
		return
	}
	d, err := a.opts.Console.Detail(r.Context(), id)
	if errors.Is(err, pg.ErrNotFound) {
		writeProblem(w, r, codes.JobNotFound)
		return
	}
	if err != nil {
		writeProblem(w, r, codes.TargetUnavailable)
		return
	}
	type lineage struct {
		Source     string `json:"sourceJobRecordId"`
		Root       string `json:"rootJobRecordId"`
		Generation int    `json:"generation"`
	}
	out := struct {
		opsJob
		PayloadDigestTag  string       `json:"payloadDigestTag"`
		RecordCount       *int         `json:"recordCount,omitempty"`
		LeaseOwnerID      *string      `json:"leaseOwnerId,omitempty"`
		LeaseExpiresAt    *time.Time   `json:"leaseExpiresAt,omitempty"`
		LeaseFencingToken *int64       `json:"leaseFencingToken,omitempty"`
		DatabaseNow       time.Time    `json:"databaseNow"`
		Lineage           *lineage     `json:"lineage,omitempty"`
		Children          []opsJob     `json:"replays"`
		Progress          *opsProgress `json:"progress,omitempty"`
	}{opsJob: toOpsJob(d.OpsJob), PayloadDigestTag: d.PayloadDigestTag, RecordCount: d.RecordCount,
		LeaseOwnerID: d.LeaseOwnerID, LeaseExpiresAt: d.LeaseExpiresAt, LeaseFencingToken: d.LeaseFencingToken,
		DatabaseNow: d.DatabaseNow.UTC(), Children: []opsJob{}, Progress: toOpsProgress(d.Progress)}
	if d.Lineage != nil {
		out.Lineage = &lineage{Source: d.Lineage.SourceJobID.String(), Root: d.Lineage.RootJobID.String(), Generation: d.Lineage.Generation}
	}
	for _, c := range d.Children {
		out.Children = append(out.Children, toOpsJob(c))
	}
	writeOpsJSON(w, out)
}

func (a *api) opsWorkers(w http.ResponseWriter, r *http.Request, _ console.Operator) {
	f, err := a.opts.Console.Fleet(r.Context())
	if err != nil {
		writeProblem(w, r, codes.TargetUnavailable)
		return
	}
	for i := range f.Workers {
		if f.Workers[i].Reclaim == nil {
			f.Workers[i].Reclaim = []uuid.UUID{}
		}
	}
	writeOpsJSON(w, f)
}

// opsReplay serves POST /api/ops/jobs/{id}/replays: an operator's replay
// of any owner's FAILED or CANCELLED job, shaped like the owner's replay
// (the byte-identical original body, a required Idempotency-Key; id 404,
// then key 400, then size 413, then the use case). 202 with Location and
// statusUrl on the operator's view of the new job, and Idempotency-Replayed.
func (a *api) opsReplay(w http.ResponseWriter, r *http.Request, op console.Operator) {
	id, key, body, release, ok := a.readReplay(w, r)
	defer release()
	if !ok {
		return
	}
	res, err := a.opts.Console.Replay(r.Context(), op, id, key, body)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeAccepted(w, "/api/ops/jobs", res.Job, res.Replayed)
}

// registerConsole mounts /console/ and /api/ops/ on mux.
func (a *api) registerConsole(mux *http.ServeMux) {
	mux.Handle("/console/", a.consolePages())
	mux.Handle("GET /console", console.SecureHeaders(http.RedirectHandler("/console/", http.StatusMovedPermanently)))
	// ops registers an operator route; a POST route's body must be JSON
	// (requireJSON) and it is refused while the schema is incompatible
	// (gateSchema), as on the owner's routes.
	ops := func(pattern string, h opsHandler) {
		if strings.HasPrefix(pattern, http.MethodPost+" ") {
			h = gateSchema(a.opts.SchemaGate, requireJSON(h))
		}
		mux.Handle(pattern, a.operatorRoute(h))
	}
	ops("GET /api/ops/overview", a.opsOverview)
	ops("GET /api/ops/jobs", a.opsJobs)
	ops("GET /api/ops/jobs/{id}", a.opsJob)
	ops("GET /api/ops/workers", a.opsWorkers)
	ops("GET /api/ops/audit", a.opsAudit)
	ops("POST /api/ops/jobs/{id}/replays", a.opsReplay)
	mux.Handle("/api/ops/jobs/{id}/replays", a.authenticated(func(w http.ResponseWriter, r *http.Request, _ string) {
		w.Header().Set("Allow", "POST")
		writeProblem(w, r, codes.MethodNotAllowed)
	}))
	for _, p := range []string{"/api/ops/overview", "/api/ops/jobs", "/api/ops/jobs/{id}", "/api/ops/workers", "/api/ops/audit"} {
		mux.Handle(p, a.authenticated(func(w http.ResponseWriter, r *http.Request, _ string) {
			w.Header().Set("Allow", "GET, HEAD")
			writeProblem(w, r, codes.MethodNotAllowed)
		}))
	}
}
