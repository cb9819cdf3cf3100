package pg_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"testing"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// An owner's list, newest first, reads the ascending pagination index
// (migration 00016) backwards: one index scan of
// etl_job_owner_pagination_index, no sort, and a page of the first or a
// later cursor reads only its limit of rows, on 100,000 jobs of seven
// owners. With a status filter it walks the same index.
func TestListJobsReadsThePaginationIndexBackwards(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	seedOpsJobs(t, pool, 100000)
	ctx := context.Background()
	sum := md5.Sum([]byte("3"))
	owner := hex.EncodeToString(sum[:]) + hex.EncodeToString(sum[:]) // seedOpsJobs's owner i % 7 = 3
	const limit = 50
	first, err := pg.ListJobs(ctx, pool, pg.ListParams{PrincipalScopeHash: owner, Limit: limit})
	if err != nil || len(first) != limit {
		t.Fatalf("first page: %d jobs, %v", len(first), err)
	}
	last := first[limit-1]
	for _, c := range []struct {
		name    string
		p       pg.ListParams
		maxRows float64 // 0: not bounded by the limit (a filter)
	}{
		{"first page", pg.ListParams{PrincipalScopeHash: owner, Limit: limit}, limit},
		{"after a cursor", pg.ListParams{PrincipalScopeHash: owner, Limit: limit,
			After: &pg.PageKey{CreatedAt: last.CreatedAt, JobID: last.JobID}}, limit},
		{"status filter", pg.ListParams{PrincipalScopeHash: owner, Limit: limit, Status: pg.StatusSucceeded}, 0},
	} {
		sql, args := pg.ListJobsSQL(c.p)
		var out []byte
		if err := pool.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args...).Scan(&out); err != nil {
			t.Fatalf("%s: explain: %v", c.name, err)
		}
		var scans, sorts []pgtest.PlanNode
		for _, n := range pgtest.PlanNodes(t, out) {
			if n.RelationName == "etl_job_records" {
				scans = append(scans, n)
			}
			if n.NodeType == "Sort" || n.NodeType == "Incremental Sort" {
				sorts = append(sorts, n)
			}
		}
		if len(scans) != 1 || len(sorts) != 0 || scans[0].NodeType != "Index Scan" ||
			scans[0].IndexName != "etl_job_owner_pagination_index" || scans[0].ScanDirection != "Backward" {
			t.Fatalf("%s: scans %+v, sorts %d; want one backward index scan of etl_job_owner_pagination_index and no sort", c.name, scans, len(sorts))
		}
		if c.maxRows > 0 && scans[0].ActualRows != c.maxRows {
			t.Errorf("%s: the index scan produced %v rows, want the limit %v", c.name, scans[0].ActualRows, c.maxRows)
		}
	}
}
