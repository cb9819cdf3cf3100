package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/console"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// getPage serves path through the console's handler as op and returns the
// status and body.
func getPage(t *testing.T, h http.Handler, op console.Operator, path string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil).WithContext(console.WithOperator(context.Background(), op))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

// A bulk cancellation through the console writes one audit row with its
// filter and count, and the Audit page (linked from the navigation) shows
// the operator actions newest first with the operator as an 8-character
// hash prefix, never the whole hash, and pages to older rows.
func TestAuditPageListsOperatorActionsNewestFirst(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	c, err := console.New(console.Options{DB: pool, HashKey: []byte("audit-page-test-key-0123456789ab")})
	if err != nil {
		t.Fatal(err)
	}
	op := console.Operator{ScopeHash: pgtest.SHA("audit-page-operator")}
	// 21 older actions (cancels of absent jobs), then a bulk cancel of 3.
	for i := 0; i < 21; i++ {
		if _, err := c.Cancel(ctx, op, pgtest.InsertJobs(t, pool, pg.NewJob{Payload: fmt.Sprintf(`[{"id":"p%d"}]`, i)})[0]); err != nil {
			t.Fatal(err)
		}
	}
	pgtest.InsertN(t, pool, 3, pg.NewJob{Payload: `[{"id":"bulk"}]`})
	n, err := c.BulkCancel(ctx, op, console.Filter{Status: pg.StatusPending, Kind: pg.KindETLRecords}, 3)
	if err != nil || n != 3 {
		t.Fatalf("bulk cancel: %d, %v", n, err)
	}

	h := c.Handler()
	status, body := getPage(t, h, op, "/console/audit?limit=20")
	if status != http.StatusOK {
		t.Fatalf("audit page: %d\n%s", status, body)
	}
	for _, want := range []string{
		`<a href="/console/audit" aria-current="page">Audit</a>`,
		`<td>bulk_cancel</td>`,
		`&#34;state&#34;: &#34;PENDING&#34;`, `&#34;kind&#34;: &#34;etl_records&#34;`, `&#34;confirmed&#34;: 3`,
		`<td>3</td>`,
		`<code>` + op.ScopeHash[:8] + `</code>`,
		`rel="next">Older</a>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("audit page lacks %s", want)
		}
	}
	if strings.Contains(body, op.ScopeHash) {
		t.Error("audit page shows the operator's whole scope hash")
	}
	if strings.Index(body, "bulk_cancel") > strings.Index(body, "<td>cancel</td>") {
		t.Error("the newest action (bulk_cancel) is not listed first")
	}
	if got := strings.Count(body, "<td>cancel</td>"); got != 19 {
		t.Errorf("first page: %d cancel rows, want 19 (20 rows with the bulk cancel)", got)
	}
	next := body[strings.Index(body, `<a href="/console/audit?before=`)+len(`<a href="`):]
	next = strings.ReplaceAll(next[:strings.Index(next, `"`)], "&amp;", "&")
	status, older := getPage(t, h, op, next)
	if status != http.StatusOK || strings.Count(older, "<td>cancel</td>") != 2 || strings.Contains(older, `rel="next"`) ||
		!strings.Contains(older, `<a href="/console/audit">Newest</a>`) {
		t.Fatalf("older page %s: %d\n%s", next, status, older)
	}
	if status, _ := getPage(t, h, op, "/console/audit?before=abc"); status != http.StatusBadRequest {
		t.Fatalf("bad cursor: %d, want 400", status)
	}
	if status, _ := getPage(t, h, console.Operator{}, "/console/audit"); status != http.StatusForbidden {
		t.Fatalf("without an operator: %d, want 403", status)
	}
}
