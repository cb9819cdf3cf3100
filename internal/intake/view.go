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
type JobView struct {
	JobRecordID  string  `json:"jobRecordId"`
	JobStatus    string  `json:"jobStatus"`
	AttemptCount int     `json:"attemptCount"`
	FailureCode  *string `json:"failureCode,omitempty"`
	CreatedAt    string  `json:"createdAt"`
	UpdatedAt    string  `json:"updatedAt"`
}

// NewJobView builds the representation of j.
func NewJobView(j pg.Job) JobView {
	return JobView{
		JobRecordID:  j.JobID.String(),
		JobStatus:    j.Status,
		AttemptCount: j.AttemptCount,
		FailureCode:  j.FailureCode,
		CreatedAt:    FormatTime(j.CreatedAt),
		UpdatedAt:    FormatTime(j.UpdatedAt),
	}
}

// Active reports whether the job may still change by itself (PENDING or
// RUNNING): pollers get a Retry-After hint only then.
func (v JobView) Active() bool {
	return v.JobStatus == pg.StatusPending || v.JobStatus == pg.StatusRunning
}

// ETag is the weak entity tag W/"<sha256 hex>" over the canonical string of
// the six fields in order (jobRecordId, jobStatus, attemptCount, failureCode,
// createdAt, updatedAt), each "N;" when null and "V<len>:<value>" otherwise,
// len being the value's character count. Every replica computes the same tag
// for the same state.
func (v JobView) ETag() string {
	var b strings.Builder
	field := func(s string) {
		b.WriteByte('V')
		b.WriteString(strconv.Itoa(len(s))) // all six values are ASCII
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
	sum := sha256.Sum256([]byte(b.String()))
	return `W/"` + hex.EncodeToString(sum[:]) + `"`
}
