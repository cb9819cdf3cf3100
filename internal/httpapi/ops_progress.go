package httpapi

import (
	"time"

	"github.com/mightyetl/mightyetl/internal/pg"
)

// opsProgress is a large job's load in the operator's job detail: the
// owner's progress members (RFC 3339 times, as the rest of /api/ops) and
// what only an operator sees.
type opsProgress struct {
	RecordsLoaded      int64      `json:"recordsLoaded"`
	RecordsTotal       *int64     `json:"recordsTotal,omitempty"`
	ChunksDone         int64      `json:"chunksDone"`
	BadRecords         int64      `json:"badRecords"`
	FailedRecordNumber *int64     `json:"failedRecordNumber,omitempty"`
	LastCheckpointAt   *time.Time `json:"lastCheckpointAt,omitempty"`
	PayloadBytes       int64      `json:"payloadBytes"`
	BytesDone          *int64     `json:"bytesDone,omitempty"`
	LoadState          string     `json:"loadState"`
	MaxBadRecords      int64      `json:"maxBadRecords"`
	LoadCreatedAt      time.Time  `json:"loadCreatedAt"`
}

// toOpsProgress is p's JSON form; nil for nil.
func toOpsProgress(p *pg.OpsProgress) *opsProgress {
	if p == nil {
		return nil
	}
	out := &opsProgress{RecordsLoaded: p.RecordsLoaded, RecordsTotal: p.RecordsTotal, ChunksDone: p.ChunksDone,
		BadRecords: p.BadRecords, FailedRecordNumber: p.FailedRecordNumber, PayloadBytes: p.PayloadBytes,
		BytesDone: p.BytesDone, LoadState: p.LoadState, MaxBadRecords: p.MaxBadRecords, LoadCreatedAt: p.CreatedAt.UTC()}
	if p.LastCheckpointAt != nil {
		at := p.LastCheckpointAt.UTC()
		out.LastCheckpointAt = &at
	}
	return out
}
