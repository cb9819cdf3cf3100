package httpapi

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// GET /api/ops/overview has the claimable jobs by owner and priority: the
// owners as 8-character hash prefixes (never the whole hash, nor the
// 16-character owner slot), most claimable first, each with its counts by
// priority, its oldest claimable age by the database clock, its weight and
// claim state; and the totals.
func TestOpsOverviewClaimableByOwner(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice, bob := auth.ScopeHash(testHashKey, "alice"), auth.ScopeHash(testHashKey, "bob")
	aliceJobs := pgtest.InsertN(t, e.pool, 3, pg.NewJob{PrincipalScopeHash: alice, Priority: 1})
	pgtest.InsertN(t, e.pool, 1, pg.NewJob{PrincipalScopeHash: alice, Priority: 4})
	pgtest.InsertN(t, e.pool, 1, pg.NewJob{PrincipalScopeHash: bob, Priority: 2})
	pgtest.MakeAvailable(t, e.pool, aliceJobs[0], 90*time.Second)

	res := e.do(req{Method: "GET", Path: "/api/ops/overview", Principal: "operator"})
	if res.Status != 200 {
		t.Fatalf("overview: %d %s", res.Status, res.Body)
	}
	var o struct {
		ClaimableByOwner struct {
			Estimated   bool                        `json:"estimated"`
			Claimable   int64                       `json:"claimable"`
			ByPriority  []int64                     `json:"claimableByPriority"`
			Owners      []owner                     `json:"owners"`
			ClaimOwners struct{ Owners, Due int64 } `json:"claimOwners"`
		} `json:"claimableByOwner"`
	}
	res.json(t, &o)
	c := o.ClaimableByOwner
	if c.Estimated || c.Claimable != 5 || fmt.Sprint(c.ByPriority) != "[3 1 0 1]" || c.ClaimOwners.Owners != 2 || c.ClaimOwners.Due != 2 {
		t.Fatalf("totals: %+v", c)
	}
	if len(c.Owners) != 2 || c.Owners[0].Owner != alice[:8] || c.Owners[1].Owner != bob[:8] {
		t.Fatalf("owners %+v, want alice then bob by prefix", c.Owners)
	}
	a := c.Owners[0]
	if a.Claimable != 4 || fmt.Sprint(a.ByPriority) != "[3 0 0 1]" || a.Weight == nil || *a.Weight != 1 || a.ClaimState != pg.OwnerDue ||
		a.OldestClaimableAge == nil || *a.OldestClaimableAge < 90 || a.DueSince == nil {
		t.Fatalf("alice: %+v", a)
	}
	for _, h := range []string{alice, bob} {
		if strings.Contains(string(res.Body), h[:16]) {
			t.Fatalf("the overview shows more of a principal scope hash than its prefix: %s", res.Body)
		}
	}
}

// owner is one owner of the overview's claimableByOwner.
type owner struct {
	Owner              string   `json:"owner"`
	Claimable          int64    `json:"claimable"`
	ByPriority         []int64  `json:"claimableByPriority"`
	OldestClaimableAge *float64 `json:"oldestClaimableAgeSeconds"`
	Weight             *int     `json:"weight"`
	ClaimState         string   `json:"claimState"`
	DueSince           *float64 `json:"dueSinceSeconds"`
}

// GET /api/ops/jobs?priority= keeps the jobs of one priority (1..4) and
// every job shows its priority; any other value is 400
// etl_ops_invalid_filter.
func TestOpsJobsPriorityFilter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	owner := auth.ScopeHash(testHashKey, "alice")
	pgtest.InsertN(t, e.pool, 2, pg.NewJob{PrincipalScopeHash: owner, Priority: 1})
	low := pgtest.InsertN(t, e.pool, 3, pg.NewJob{PrincipalScopeHash: owner, Priority: 4})
	type page struct {
		Jobs []struct {
			JobRecordID string `json:"jobRecordId"`
			Priority    int    `json:"priority"`
		} `json:"jobs"`
	}
	for _, path := range []string{"/api/ops/jobs?priority=4", "/api/ops/jobs?priority=4&state=PENDING"} {
		res := e.do(req{Method: "GET", Path: path, Principal: "operator"})
		var p page
		res.json(t, &p)
		if res.Status != 200 || len(p.Jobs) != len(low) {
			t.Fatalf("%s: %d, %d jobs: %s", path, res.Status, len(p.Jobs), res.Body)
		}
		for _, j := range p.Jobs {
			if j.Priority != 4 {
				t.Fatalf("%s lists a job of priority %d", path, j.Priority)
			}
		}
	}
	res := e.do(req{Method: "GET", Path: "/api/ops/jobs", Principal: "operator"})
	var all page
	res.json(t, &all)
	if len(all.Jobs) != 5 || all.Jobs[len(all.Jobs)-1].Priority != 1 {
		t.Fatalf("unfiltered: %s", res.Body)
	}
	for _, bad := range []string{"0", "5", "01", "x", "-1", "1.0"} {
		res := e.do(req{Method: "GET", Path: "/api/ops/jobs?priority=" + bad, Principal: "operator"})
		if res.Status != 400 || res.problemCode(t) != codes.OpsInvalidFilter {
			t.Fatalf("priority=%s: %d %s", bad, res.Status, res.Body)
		}
	}
}
