package pg

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// PageKey is a keyset position in an owner's job list: the list continues
// with the jobs strictly after (CreatedAt, JobID) in the order created_at
// DESC, job_record_id DESC.
type PageKey struct {
	CreatedAt time.Time
	JobID     uuid.UUID
}

// ListParams selects one page of an owner's jobs.
type ListParams struct {
	// PrincipalScopeHash is the owner; only its jobs are read.
	PrincipalScopeHash string
	// Status, when not empty, keeps only jobs in that state.
	Status string
	// Priority, when not 0, keeps only jobs of that priority (1..4).
	Priority int
	// After, when not nil, starts the page after that position.
	After *PageKey
	// Limit is the most jobs returned; it must be at least 1.
	Limit int
}

// ListJobs returns up to p.Limit of the owner's jobs, newest first
// (created_at DESC, job_record_id DESC). The keyset predicate and order match
// etl_job_owner_pagination_index read backwards (it is ascending since
// migration 00016), so a page costs O(limit) index entries (and, when the
// page holds chunked jobs, one batched read of their Progress)
// whatever the table size; with a status filter it reads the owner's entries
// until limit of them match (a dedicated status index was dropped in
// migration 00004 because every job transition paid for it). Rows inserted while a client pages sort before its cursor and are
// never returned twice.
func ListJobs(ctx context.Context, db DBTX, p ListParams) ([]Job, error) {
	if p.Limit < 1 {
		return nil, fmt.Errorf("list jobs: limit %d below 1", p.Limit)
	}
	sql, args := listJobsSQL(p)
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	defer rows.Close()
	jobs := make([]Job, 0, p.Limit)
	for rows.Next() {
		j, err := scanScheduledJob(rows)
		if err != nil {
			return nil, fmt.Errorf("list jobs: scan: %w", err)
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	rows.Close()
	// The page's chunked jobs, if any, in one more statement.
	if err := AttachProgress(ctx, db, jobs); err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return jobs, nil
}

// listJobsSQL is ListJobs's statement and arguments for p.
func listJobsSQL(p ListParams) (string, []any) {
	var b strings.Builder
	b.WriteString(`SELECT ` + scheduleColumns + `, ` + jobColumns + ` FROM etl_job_records j WHERE j.principal_scope_hash = decode($1, 'hex')`)
	args := []any{p.PrincipalScopeHash}
	if p.Status != "" {
		args = append(args, p.Status)
		b.WriteString(` AND j.job_status = $` + strconv.Itoa(len(args)))
	}
	if p.Priority != 0 {
		// Like the status filter: the owner's entries are read until
		// limit of them match.
		args = append(args, int64(p.Priority))
		b.WriteString(` AND j.job_priority = $` + strconv.Itoa(len(args)))
	}
	if p.After != nil {
		args = append(args, p.After.CreatedAt, p.After.JobID)
		// Row comparison: strictly after the cursor in the descending order.
		fmt.Fprintf(&b, ` AND (j.created_at, j.job_record_id) < ($%d, $%d)`, len(args)-1, len(args))
	}
	args = append(args, p.Limit)
	fmt.Fprintf(&b, ` ORDER BY j.created_at DESC, j.job_record_id DESC LIMIT $%d`, len(args))
	return b.String(), args
}
