package intake

import (
	"context"
	"crypto/hmac"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// ProgressView is a chunked job's progress in its representation (issue
// 32): the load's last committed checkpoint. Optional members are omitted
// when unknown (recordsTotal), unset (failedRecordNumber) or before the
// first chunk (lastCheckpointAt).
type ProgressView struct {
	RecordsLoaded      int64  `json:"recordsLoaded"`
	RecordsTotal       *int64 `json:"recordsTotal,omitempty"`
	ChunksDone         int64  `json:"chunksDone"`
	BadRecords         int64  `json:"badRecords"`
	FailedRecordNumber *int64 `json:"failedRecordNumber,omitempty"`
	LastCheckpointAt   string `json:"lastCheckpointAt,omitempty"`
	PayloadBytes       int64  `json:"payloadBytes"`
}

func newProgressView(p pg.Progress) *ProgressView {
	v := &ProgressView{RecordsLoaded: p.RecordsLoaded, ChunksDone: p.ChunksDone, BadRecords: p.BadRecords,
		PayloadBytes: p.PayloadBytes}
	if p.RecordsTotal != nil {
		n := *p.RecordsTotal
		v.RecordsTotal = &n
	}
	if p.FailedRecordNumber != nil {
		n := *p.FailedRecordNumber
		v.FailedRecordNumber = &n
	}
	if p.LastCheckpointAt != nil {
		v.LastCheckpointAt = FormatTime(*p.LastCheckpointAt)
	}
	return v
}

// fields are the seven members in the ETag's order (recordsLoaded,
// recordsTotal, chunksDone, badRecords, failedRecordNumber,
// lastCheckpointAt, payloadBytes), nil for an absent one.
func (p *ProgressView) fields() [7]*string {
	num := func(n int64) *string { s := strconv.FormatInt(n, 10); return &s }
	opt := func(n *int64) *string {
		if n == nil {
			return nil
		}
		return num(*n)
	}
	var at *string
	if p.LastCheckpointAt != "" {
		at = &p.LastCheckpointAt
	}
	return [7]*string{num(p.RecordsLoaded), opt(p.RecordsTotal), num(p.ChunksDone), num(p.BadRecords),
		opt(p.FailedRecordNumber), at, num(p.PayloadBytes)}
}

// withProgress returns j with its Progress read when it is a chunked job
// whose Progress the read that produced it did not fill (a cancellation's
// answer). The cancellation has committed by then, so a failed read leaves
// Progress nil rather than failing the answer.
func (s *Service) withProgress(ctx context.Context, j pg.Job) pg.Job {
	if j.Kind != pg.KindETLChunked || j.Progress != nil {
		return j
	}
	jobs := []pg.Job{j}
	if err := pg.AttachProgress(ctx, s.db, jobs); err != nil {
		return j
	}
	return jobs[0]
}

// BadRecordsRequest asks for one page of the bad records of one of the
// caller's jobs.
type BadRecordsRequest struct {
	Principal string
	JobID     uuid.UUID
	// Limit is 1..100; zero means 50. Anything else is ErrInvalidPageLimit.
	Limit int
	// Cursor is a NextCursor from an earlier page of the same principal and
	// job, or empty for the first page. Anything else is
	// ErrInvalidPageCursor.
	Cursor string
}

// BadRecordsResult is one page of bad records.
type BadRecordsResult struct {
	// Records are in record-number order.
	Records []pg.BadRecord
	// NextCursor continues the list; empty on the last page. It is bound to
	// the principal and the job.
	NextCursor string
}

// BadRecords returns one keyset page of the records a chunked job of the
// caller skipped under maxBadRecords (record number and code, never the
// record). Absent and foreign jobs are ErrJobNotFound; a job without bad
// records (of any kind) has an empty page. Validation order: limit, cursor.
func (s *Service) BadRecords(ctx context.Context, req BadRecordsRequest) (BadRecordsResult, error) {
	scope, err := s.scope(req.Principal)
	if err != nil {
		return BadRecordsResult{}, err
	}
	if req.Limit == 0 {
		req.Limit = DefaultListLimit
	}
	if req.Limit < 1 || req.Limit > MaxListLimit {
		return BadRecordsResult{}, ErrInvalidPageLimit
	}
	var after int64
	if req.Cursor != "" {
		if after, err = decodeBadRecordCursor(s.hashKey, scope, req.JobID, req.Cursor); err != nil {
			return BadRecordsResult{}, err
		}
	}
	records, err := pg.ListBadRecords(ctx, s.db, scope, req.JobID, after, req.Limit+1)
	if errors.Is(err, pg.ErrNotFound) {
		return BadRecordsResult{}, ErrJobNotFound
	}
	if err != nil {
		return BadRecordsResult{}, storeError(err)
	}
	res := BadRecordsResult{Records: records}
	if len(records) > req.Limit {
		res.Records = records[:req.Limit]
		res.NextCursor = encodeBadRecordCursor(s.hashKey, scope, req.JobID, res.Records[req.Limit-1].RecordNumber)
	}
	return res, nil
}

// badRecordPosition is what a bad-record cursor's MAC covers: the job and
// the last record number of the page.
func badRecordPosition(job uuid.UUID, after int64) string {
	return "bad-records|" + job.String() + "|" + strconv.FormatInt(after, 10)
}

// encodeBadRecordCursor renders a bad-record page position for scope and
// job: unpadded base64url of "<record number>|<owner MAC>", the MAC
// (cursorMAC) over the job and the record number, so the cursor verifies
// for no other owner or job.
func encodeBadRecordCursor(key []byte, scope string, job uuid.UUID, after int64) string {
	n := strconv.FormatInt(after, 10)
	return base64.RawURLEncoding.EncodeToString([]byte(n + "|" + cursorMAC(key, scope, badRecordPosition(job, after))))
}

// decodeBadRecordCursor parses a cursor of encodeBadRecordCursor; anything
// not canonical, or issued for another owner or job, is
// ErrInvalidPageCursor.
func decodeBadRecordCursor(key []byte, scope string, job uuid.UUID, s string) (int64, error) {
	if len(s) > MaxCursorLength {
		return 0, ErrInvalidPageCursor
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil || base64.RawURLEncoding.EncodeToString(raw) != s {
		return 0, ErrInvalidPageCursor
	}
	n, mac, ok := strings.Cut(string(raw), "|")
	if !ok {
		return 0, ErrInvalidPageCursor
	}
	after, err := strconv.ParseInt(n, 10, 64)
	if err != nil || after < 1 || strconv.FormatInt(after, 10) != n {
		return 0, ErrInvalidPageCursor
	}
	if !hmac.Equal([]byte(cursorMAC(key, scope, badRecordPosition(job, after))), []byte(mac)) {
		return 0, ErrInvalidPageCursor
	}
	return after, nil
}
