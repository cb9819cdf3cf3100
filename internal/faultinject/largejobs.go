package faultinject

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mightyetl/mightyetl/internal/etl"
)

// The invariants of large (chunked) jobs the large-job checker proves.
const (
	InvLargeSucceeded     = "large job SUCCEEDED"
	InvLargeRowsExact     = "large job has exactly its transformed rows, each once"
	InvLargeAllVisible    = "large job's rows all visible once SUCCEEDED"
	InvLargeCancelled     = "large job cancelled mid-load is CANCELLED"
	InvLargeCancelledNone = "cancelled large job has no visible row"
	InvLargeNeverPartial  = "a reader never sees part of a large job"
)

// LargeJob is one large job of a run: its deterministic JSON Lines payload
// (records 1..N, Tag names the job in every record id) and, once
// submitted, its job id.
type LargeJob struct {
	Tag     string
	Records int
	// Cancel says the scenario cancels this job mid-load.
	Cancel bool
	JobID  string

	want map[string]map[string]any // expectedRows, computed once
}

// largeRecord appends record i of the job tagged tag as one line of JSON
// Lines.
func largeRecord(b []byte, tag string, i int) []byte {
	b = append(b, `{"id":"`...)
	b = append(b, tag...)
	b = append(b, '-')
	b = strconv.AppendInt(b, int64(i), 10)
	b = append(b, `","name":"jane doe","email":"Jane.Doe@Example.com","amount":"`...)
	b = strconv.AppendInt(b, int64(i%100000), 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(i%10), 10)
	return append(b, "\",\"city\":\"springfield\"}\n"...)
}

// Payload is the job's whole JSON Lines payload.
func (j *LargeJob) Payload() []byte {
	b := make([]byte, 0, j.Records*112)
	for i := 1; i <= j.Records; i++ {
		b = largeRecord(b, j.Tag, i)
	}
	return b
}

// expectedRows maps each expected row's data text to its normalized record
// (decoded), as the product's transform (etl.Process, the one chunked loads
// use) makes them of the payload's records.
func (j *LargeJob) expectedRows() (map[string]map[string]any, error) {
	if j.want != nil {
		return j.want, nil
	}
	want := make(map[string]map[string]any, j.Records)
	var line []byte
	for i := 1; i <= j.Records; i++ {
		line = append(largeRecord(append(line[:0], '['), j.Tag, i), ']')
		rows, err := etl.Process(line, 1)
		if err != nil || len(rows) != 1 {
			return nil, fmt.Errorf("record %d of %s: transform: %v (%d rows)", i, j.Tag, err, len(rows))
		}
		var norm map[string]any
		if err := json.Unmarshal(rows[0].Normalized, &norm); err != nil {
			return nil, fmt.Errorf("record %d of %s: normalized: %w", i, j.Tag, err)
		}
		if _, dup := want[rows[0].Data]; dup {
			return nil, fmt.Errorf("record %d of %s: two records give one row", i, j.Tag)
		}
		want[rows[0].Data] = norm
	}
	j.want = want
	return want, nil
}

// LargeReport is what the large-job checker and the visibility reader found.
type LargeReport struct {
	Violations map[string]int
	Details    []string // with ids: the run directory only
}

func (r *LargeReport) add(inv, detail string) {
	if r.Violations == nil {
		r.Violations = map[string]int{}
	}
	r.Violations[inv]++
	if len(r.Details) < 200 {
		r.Details = append(r.Details, inv+": "+detail)
	}
}

// Total is the number of violations.
func (r *LargeReport) Total() int {
	n := 0
	for _, v := range r.Violations {
		n += v
	}
	return n
}

// CheckLargeJobs proves, from the database, on terminal large jobs: a job
// not cancelled SUCCEEDED, its rows in processed_data are exactly the
// transform of its records, each once, and all of them are in
// processed_data_visible; a job cancelled mid-load is CANCELLED and has no
// visible row.
// An error means it could not read its evidence.
func CheckLargeJobs(ctx context.Context, db *pgxpool.Pool, jobs []*LargeJob) (*LargeReport, error) {
	r := &LargeReport{}
	for _, j := range jobs {
		var status string
		var visible int
		err := db.QueryRow(ctx, `SELECT j.job_status,
			(SELECT count(*) FROM processed_data_visible v WHERE v.job_record_id = j.job_record_id)
			FROM etl_job_records j WHERE j.job_record_id = $1::uuid`, j.JobID).Scan(&status, &visible)
		if err != nil {
			return nil, fmt.Errorf("large job %s: %w", j.Tag, err)
		}
		if j.Cancel {
			if status != "CANCELLED" {
				r.add(InvLargeCancelled, fmt.Sprintf("job %s (%s) is %s", j.JobID, j.Tag, status))
			}
			if visible != 0 {
				r.add(InvLargeCancelledNone, fmt.Sprintf("job %s (%s) %s: %d rows visible", j.JobID, j.Tag, status, visible))
			}
			continue
		}
		if status != "SUCCEEDED" {
			r.add(InvLargeSucceeded, fmt.Sprintf("job %s (%s) is %s", j.JobID, j.Tag, status))
		}
		if visible != j.Records {
			r.add(InvLargeAllVisible, fmt.Sprintf("job %s (%s): %d of %d rows visible", j.JobID, j.Tag, visible, j.Records))
		}
		if err := checkLargeRows(ctx, db, j, r); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// checkLargeRows compares the job's processed_data rows with the transform
// of its records: every expected row once, nothing else.
func checkLargeRows(ctx context.Context, db *pgxpool.Pool, j *LargeJob, r *LargeReport) error {
	want, err := j.expectedRows()
	if err != nil {
		return err
	}
	rows, err := db.Query(ctx, `SELECT data, normalized_record::text FROM processed_data WHERE job_record_id = $1::uuid`, j.JobID)
	if err != nil {
		return fmt.Errorf("rows of large job %s: %w", j.Tag, err)
	}
	defer rows.Close()
	seen := make(map[string]int, j.Records)
	var extra, wrong int
	for rows.Next() {
		var data, normText string
		if err := rows.Scan(&data, &normText); err != nil {
			return fmt.Errorf("rows of large job %s: %w", j.Tag, err)
		}
		norm, ok := want[data]
		if !ok {
			extra++
			continue
		}
		seen[data]++
		var got map[string]any
		if err := json.Unmarshal([]byte(normText), &got); err != nil || !maps.EqualFunc(got, norm, func(a, b any) bool { return a == b }) {
			wrong++
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("rows of large job %s: %w", j.Tag, err)
	}
	var missing, doubled int
	for data := range want {
		switch n := seen[data]; {
		case n == 0:
			missing++
		case n > 1:
			doubled += n - 1
		}
	}
	if extra+wrong+missing+doubled > 0 {
		r.add(InvLargeRowsExact, fmt.Sprintf("job %s (%s): %d missing, %d extra copies, %d unexpected rows, %d with another normalized record (of %d)",
			j.JobID, j.Tag, missing, doubled, extra, wrong, j.Records))
	}
	return nil
}

// VisibilityReader polls processed_data_visible while large jobs load, as a
// reader of loaded data would, and records every snapshot in which a large
// job is partly visible (neither none nor all of its rows), has rows
// visible without being SUCCEEDED, or (cancelled) has any row visible. Each
// poll is one statement, so one snapshot: the database is the authority.
type VisibilityReader struct {
	DB   *pgxpool.Pool
	Jobs []*LargeJob // with JobID; jobs without one yet are skipped

	mu       sync.Mutex
	polls    int
	errs     int
	complete map[string]bool // job ids seen wholly visible
	report   LargeReport
}

// Run polls every period until ctx ends.
func (v *VisibilityReader) Run(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		v.poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (v *VisibilityReader) poll(ctx context.Context) {
	v.mu.Lock()
	byID := map[string]*LargeJob{}
	var ids []string
	for _, j := range v.Jobs {
		if j.JobID != "" {
			byID[j.JobID] = j
			ids = append(ids, j.JobID)
		}
	}
	v.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	rows, err := v.DB.Query(ctx, `SELECT j.job_record_id::text, j.job_status,
		(SELECT count(*) FROM processed_data_visible d WHERE d.job_record_id = j.job_record_id)
		FROM etl_job_records j WHERE j.job_record_id = ANY($1::uuid[])`, ids)
	type seen struct {
		id, status string
		visible    int
	}
	var got []seen
	if err == nil {
		for rows.Next() {
			var s seen
			if err = rows.Scan(&s.id, &s.status, &s.visible); err != nil {
				break
			}
			got = append(got, s)
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			v.errs++
		}
		return
	}
	v.polls++
	if v.complete == nil {
		v.complete = map[string]bool{}
	}
	for _, s := range got {
		j := byID[s.id]
		switch {
		case j.Cancel && s.visible != 0:
			v.report.add(InvLargeCancelledNone, fmt.Sprintf("poll %d: job %s (%s) %s: %d rows visible", v.polls, s.id, j.Tag, s.status, s.visible))
		case s.visible != 0 && s.visible != j.Records:
			v.report.add(InvLargeNeverPartial, fmt.Sprintf("poll %d: job %s (%s) %s: %d of %d rows visible", v.polls, s.id, j.Tag, s.status, s.visible, j.Records))
		case s.visible != 0 && s.status != "SUCCEEDED":
			v.report.add(InvLargeNeverPartial, fmt.Sprintf("poll %d: job %s (%s) %s: rows visible before SUCCEEDED", v.polls, s.id, j.Tag, s.status))
		case s.visible == j.Records:
			v.complete[s.id] = true
		}
	}
}

// Result returns the reader's polls, failed polls (the harness's pool could
// not read), the jobs it saw wholly visible and its violations.
func (v *VisibilityReader) Result() (polls, errs, complete int, r LargeReport) {
	v.mu.Lock()
	defer v.mu.Unlock()
	r = LargeReport{Violations: maps.Clone(v.report.Violations), Details: append([]string(nil), v.report.Details...)}
	return v.polls, v.errs, len(v.complete), r
}

// SetJobID records a job's id once submitted (under the reader's lock, as
// Run reads it).
func (v *VisibilityReader) SetJobID(j *LargeJob, id string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	j.JobID = id
}
