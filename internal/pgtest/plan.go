package pgtest

import (
	"encoding/json"
	"testing"
)

// PlanNode is one node of EXPLAIN (ANALYZE, FORMAT JSON), without its
// children.
type PlanNode struct {
	NodeType      string  `json:"Node Type"`
	RelationName  string  `json:"Relation Name"`
	IndexName     string  `json:"Index Name"`
	ScanDirection string  `json:"Scan Direction"`
	ActualRows    float64 `json:"Actual Rows"`
	ActualLoops   float64 `json:"Actual Loops"`
	// RowsRemovedByFilter is per loop, as ActualRows.
	RowsRemovedByFilter float64 `json:"Rows Removed by Filter"`
}

// PlanNodes parses the output of EXPLAIN (ANALYZE, FORMAT JSON) and returns
// every node of the plan, depth first (init plans and CTEs included).
func PlanNodes(t testing.TB, explained []byte) []PlanNode {
	t.Helper()
	type node struct {
		PlanNode
		Plans []node `json:"Plans"`
	}
	var plans []struct {
		Plan node `json:"Plan"`
	}
	if err := json.Unmarshal(explained, &plans); err != nil {
		t.Fatalf("pgtest: parse plan: %v", err)
	}
	var out []PlanNode
	var walk func(n node)
	walk = func(n node) {
		out = append(out, n.PlanNode)
		for _, c := range n.Plans {
			walk(c)
		}
	}
	for _, p := range plans {
		walk(p.Plan)
	}
	return out
}
