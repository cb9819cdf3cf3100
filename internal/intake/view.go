package intake

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/mightyetl/mightyetl/internal/pg"
)

// TimeLayout is the wire form of every timestamp: RFC 3339 in UTC with "Z"
// and exactly six fractional digits (PostgreSQL's microsecond precision).
const TimeLayout = "2006-01-02T15:04:05.000000Z"

// FormatTime renders t in TimeLayout.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeLayout) }

// JobView is the owner-visible representation of a job, the status object of
// the contract. It never holds a payload, principal, key, hash or lease id.
// The three replay fields are set only for a replay job (zero otherwise, and
// then omitted from JSON); Progress only for a chunked job (issue 32).
// Priority is the job's (1..4; omitted only when the read did not fill it,
// which no owner read does); NotBefore is set only while the job is PENDING
// and not claimable before that time, by the database clock at the read
// (pg.Job.NotBefore): a scheduled job, or a retry waiting out its backoff.
type JobView struct {
	JobRecordID             string        `json:"jobRecordId"`
	JobStatus               string        `json:"jobStatus"`
	AttemptCount            int           `json:"attemptCount"`
	FailureCode             *string       `json:"failureCode,omitempty"`
	CreatedAt               string        `json:"createdAt"`
	UpdatedAt               string        `json:"updatedAt"`
	ReplaySourceJobRecordID string        `json:"replaySourceJobRecordId,omitempty"`
	ReplayRootJobRecordID   string        `json:"replayRootJobRecordId,omitempty"`
	ReplayGenerationCount   int           `json:"replayGenerationCount,omitempty"`
	Progress                *ProgressView `json:"progress,omitempty"`
	Priority                int           `json:"priority,omitempty"`
	NotBefore               string        `json:"notBefore,omitempty"`
}

// NewJobView builds the representation of j.
func NewJobView(j pg.Job) JobView {
	v := JobView{
		JobRecordID:  j.JobID.String(),
		JobStatus:    j.Status,
		AttemptCount: j.AttemptCount,
		FailureCode:  j.FailureCode,
		CreatedAt:    FormatTime(j.CreatedAt),
		UpdatedAt:    FormatTime(j.UpdatedAt),
	}
	if l := j.Lineage; l != nil {
		v.ReplaySourceJobRecordID = l.SourceJobID.String()
		v.ReplayRootJobRecordID = l.RootJobID.String()
		v.ReplayGenerationCount = l.Generation
	}
	if j.Progress != nil {
		v.Progress = newProgressView(*j.Progress)
	}
	v.Priority, v.NotBefore = ScheduleView(j)
	return v
}

// ScheduleView is j's priority and notBefore as every representation of a
// job shows them (JobView, the submit response, the NATS reply): the
// notBefore in TimeLayout, empty when j has none.
func ScheduleView(j pg.Job) (priority int, notBefore string) {
	if !j.NotBefore.IsZero() {
		notBefore = FormatTime(j.NotBefore)
	}
	return j.Priority, notBefore
}

// Active reports whether the job may still change by itself (PENDING or
// RUNNING): pollers get a Retry-After hint only then.
func (v JobView) Active() bool {
	return v.JobStatus == pg.StatusPending || v.JobStatus == pg.StatusRunning
}

// ETag is the weak entity tag W/"<sha256 hex>" over the canonical string of
// the contract's six fields in order (jobRecordId, jobStatus, attemptCount,
// failureCode, createdAt, updatedAt), each "N;" when null and
// "V<len>:<value>" otherwise, len being the value's character count. A
// replay job appends its three lineage fields in the same encoding
// (replaySourceJobRecordId, replayRootJobRecordId, replayGenerationCount);
// a job without lineage appends nothing, so its tag is exactly the
// contract's. Lineage never changes after insert, so the two forms never
// describe the same job. A job with Progress (a chunked job) then appends
// the field "progress" and its seven fields (ProgressView.fields), so a poll
// with If-None-Match sees every new checkpoint. Then a job whose priority is
// not the default 2 appends the field "priority" and its value, and a job
// with a notBefore the field "notBefore" and its value, so the tag changes
// when the notBefore passes (and the representation drops it); a job of
// priority 2 without a notBefore appends nothing. Every replica computes the
// same tag for the same state.
func (v JobView) ETag() string {
	var b strings.Builder
	field := func(s string) {
		b.WriteByte('V')
		b.WriteString(strconv.Itoa(len(s))) // every value is ASCII
		b.WriteByte(':')
		b.WriteString(s)
	}
	field(v.JobRecordID)
	field(v.JobStatus)
	field(strconv.Itoa(v.AttemptCount))
	if v.FailureCode == nil {
		b.WriteString("N;")
	} else {
		field(*v.FailureCode)
	}
	field(v.CreatedAt)
	field(v.UpdatedAt)
	if v.ReplayGenerationCount != 0 {
		field(v.ReplaySourceJobRecordID)
		field(v.ReplayRootJobRecordID)
		field(strconv.Itoa(v.ReplayGenerationCount))
	}
	if v.Progress != nil {
		field("progress")
		for _, f := range v.Progress.fields() {
			if f == nil {
				b.WriteString("N;")
			} else {
				field(*f)
			}
		}
	}
	if v.Priority != 0 && v.Priority != pg.DefaultPriority {
		field("priority")
		field(strconv.Itoa(v.Priority))
	}
	if v.NotBefore != "" {
		field("notBefore")
		field(v.NotBefore)
	}
	sum := sha256.Sum256([]byte(b.String()))
	return `W/"` + hex.EncodeToString(sum[:]) + `"`
}
