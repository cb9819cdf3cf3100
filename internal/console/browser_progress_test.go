package console_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

// progressState is what the job page shows of a large job's progress.
type progressState struct {
	Max   string `json:"max"`
	Value string `json:"value"`
	Text  string `json:"text"`
	Rate  string `json:"rate"`
	State string `json:"state"`
	Live  bool   `json:"live"`
	Load  string `json:"load"`
}

const progressStateJS = `(() => {
  const b = document.getElementById("progress-bar");
  const q = id => ((document.getElementById(id) || {}).textContent || "").replace(/\s+/g, " ").trim();
  return {max: b ? (b.getAttribute("max") || "") : "", value: b ? (b.getAttribute("value") || "") : "",
    text: q("progress-text"), rate: q("progress-rate"), state: q("job-state"),
    live: !!document.getElementById("progress-live"), load: q("load-state")};
})()`

// TestJobProgressInBrowser drives a large job's page in headless chromium
// against a real intake and PostgreSQL: the bar and the average rate since
// submission with the time left; the script's refresh after a new
// checkpoint (the bar moves, the rate is the one between the two
// checkpoints); the page reloading itself when the job succeeds; the byte
// bar of a job without a record total; a failed job's record number and
// the replay note instead of the replay form.
func TestJobProgressInBrowser(t *testing.T) {
	chrome := chromiumPath(t)
	s := startStack(t)
	ctx := context.Background()
	owner := auth.ScopeHash([]byte(s.hashKey), "alice")
	total := int64(10000)
	id := pgtest.InsertChunkedJob(t, s.pool, pgtest.ChunkedJob{Owner: owner, Status: pg.StatusRunning, RecordsTotal: &total,
		MaxBadRecords: 5, PartBytes: []int64{600000, 400000}, SubmittedAgo: 100 * time.Second,
		Checkpoint: &pgtest.ChunkedCheckpoint{ChunksDone: 2, RecordsLoaded: 1998, BadRecords: 2, NextPartOffset: 200000,
			Ago: 50 * time.Second}})
	bytesOnly := pgtest.InsertChunkedJob(t, s.pool, pgtest.ChunkedJob{Owner: owner, Status: pg.StatusRunning,
		PartBytes: []int64{600000, 400000}, SubmittedAgo: 10 * time.Second,
		Checkpoint: &pgtest.ChunkedCheckpoint{ChunksDone: 1, RecordsLoaded: 700, NextPartNumber: 2, NextPartOffset: 100000}})
	failedAt := int64(4321)
	failed := pgtest.InsertChunkedJob(t, s.pool, pgtest.ChunkedJob{Owner: owner, Status: pg.StatusFailed,
		Checkpoint: &pgtest.ChunkedCheckpoint{ChunksDone: 4, RecordsLoaded: 4000, FailedRecordNumber: &failedAt}})
	loadTimes := func() (created, checkpoint time.Time) {
		t.Helper()
		if err := s.pool.QueryRow(ctx, `SELECT created_at, checkpoint_at FROM etl_chunked_loads WHERE job_record_id = $1`, id).
			Scan(&created, &checkpoint); err != nil {
			t.Fatal(err)
		}
		return created, checkpoint
	}

	bctx, requested := openBrowser(t, chrome, s.basic("operator"))
	read := func(what string) progressState {
		t.Helper()
		return browserGet(t, bctx, what, chromedp.Evaluate[progressState](progressStateJS))
	}
	page := s.base + "/console/jobs/" + id.String()

	// First rendering: 2,000 of 10,000 done; the average since submission.
	browserDo(t, bctx, "progress page", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.ID("progress-bar")))
	created, cp1 := loadTimes()
	rate := 2000 / cp1.Sub(created).Seconds()
	st := read("first rendering")
	if st.Max != "10000" || st.Value != "2000" || !st.Live || st.State != "RUNNING" ||
		!strings.HasPrefix(st.Text, "2,000 of 10,000 records done (20.0%): 1,998 loaded, 2 skipped as bad (at most 5); 2 chunks committed.") {
		t.Fatalf("first rendering: %+v", st)
	}
	if want := "Rate: " + strconv.FormatFloat(rate, 'f', 1, 64) + " records/s on average since submission. Time left: about " +
		leftText(8000/rate) + " at that rate."; st.Rate != want || !strings.HasPrefix(st.Load, "loading, hidden from readers") {
		t.Fatalf("first rate:\n got %q\nwant %q (%+v)", st.Rate, want, st)
	}

	// The worker commits a chunk: 6,000 done. The script's next refresh
	// shows it, with the rate between the two checkpoints it saw.
	pgtest.SetChunkedCheckpoint(t, s.pool, id, pgtest.ChunkedCheckpoint{ChunksDone: 6, RecordsLoaded: 5996, BadRecords: 4,
		NextPartNumber: 2, NextPartOffset: 10})
	_, cp2 := loadTimes()
	browserDo(t, bctx, "refreshed progress", chromedp.Poll[chromedp.Void](
		`(document.getElementById("progress-bar") || {getAttribute: () => ""}).getAttribute("value") === "6000"`,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second)))
	st = read("after a chunk")
	rate = 4000 / cp2.Sub(cp1).Seconds()
	if want := "Rate: " + strconv.FormatFloat(rate, 'f', 1, 64) + " records/s between the last two checkpoints seen. Time left: about " +
		leftText(4000/rate) + " at that rate."; st.Rate != want || !strings.HasPrefix(st.Text, "6,000 of 10,000 records done (60.0%)") {
		t.Fatalf("after a chunk:\n got %q\nwant %q (%+v)", st.Rate, want, st)
	}
	refreshed := false
	for _, u := range requested() {
		refreshed = refreshed || strings.HasPrefix(u, page+"?seen=")
	}
	if !refreshed {
		t.Fatalf("no refresh request recorded: %v", requested())
	}

	// The job succeeds: the script reloads the page, which shows a full
	// bar, visible rows and no live refresh.
	succeedChunked(t, s, id)
	testwait.For(t, 60*time.Second, "the page reloaded as SUCCEEDED", func() bool {
		c, cancel := context.WithTimeout(bctx, 10*time.Second)
		defer cancel()
		st, err := chromedp.Run(c, chromedp.Evaluate[progressState](progressStateJS))
		return err == nil && st.State == "SUCCEEDED"
	})
	st = read("succeeded")
	if st.Value != "10000" || st.Max != "10000" || st.Live || st.Load != "visible to readers" ||
		!strings.HasPrefix(st.Rate, "Rate: ") || strings.Contains(st.Rate, "Time left") {
		t.Fatalf("succeeded: %+v", st)
	}

	// No record total: the bar counts bytes (600,000 + 100,000 of 1,000,000).
	browserDo(t, bctx, "bytes page", chromedp.Navigate(s.base+"/console/jobs/"+bytesOnly.String()),
		chromedp.WaitVisible(chromedp.ID("progress-bar")))
	st = read("bytes")
	if st.Max != "1000000" || st.Value != "700000" ||
		!strings.HasPrefix(st.Text, "700 records done, 683.6 KiB (700,000 bytes) of 976.6 KiB (1,000,000 bytes) read (70.0%)") ||
		!strings.HasSuffix(st.Rate, "Time left: not estimated (the record total is not known).") {
		t.Fatalf("bytes: %+v", st)
	}

	// A failed job: its record number, and the replay note, not the form.
	browserDo(t, bctx, "failed page", chromedp.Navigate(s.base+"/console/jobs/"+failed.String()),
		chromedp.WaitVisible(chromedp.ID("replay-chunked")))
	text := browserGet(t, bctx, "failed text", chromedp.Text(chromedp.CSS("main")))
	if !strings.Contains(text, "record 4,321 (line of JSON Lines or element of the array)") ||
		!strings.Contains(text, `"replayOf": "`+failed.String()+`"`) || !strings.Contains(text, "discarded (being removed)") {
		t.Fatalf("failed page:\n%s", text)
	}
	if n := browserGet(t, bctx, "replay forms", chromedp.Evaluate[int](`document.querySelectorAll("#replay-form, #progress-live").length`)); n != 0 {
		t.Fatalf("%d replay forms or live notes on a failed large job's page", n)
	}
	for _, u := range requested() {
		if !strings.HasPrefix(u, s.base+"/") && !strings.HasPrefix(u, "data:") && u != "about:blank" {
			t.Fatalf("request outside the console's origin: %s", u)
		}
	}
}

// leftText is the page's estimate of seconds left (the console rounds to
// whole seconds under ten minutes).
func leftText(seconds float64) string {
	return time.Duration(seconds * float64(time.Second)).Round(time.Second).String()
}

// succeedChunked moves the RUNNING chunked job id to SUCCEEDED as the
// worker's success transaction does: the job row terminal without payload
// or lease, the load VISIBLE, the queue row gone.
func succeedChunked(t *testing.T, s *stack, id uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	// One transaction, as the worker's success: the worker's chunked claim
	// deletes the queue row of a job it reads as terminal, so between
	// autocommitted statements its poll could delete the row first (CI saw
	// the DELETE match nothing once).
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, sql := range []string{
		`UPDATE etl_job_records SET job_status = 'SUCCEEDED', request_payload = NULL, lease_claim_id = NULL,
		     lease_owner_id = NULL, lease_expires_at = NULL, lease_fencing_token = NULL, updated_at = clock_timestamp()
		 WHERE job_record_id = $1 AND job_status = 'RUNNING'`,
		`UPDATE etl_chunked_loads SET load_state = 'VISIBLE', updated_at = clock_timestamp() WHERE job_record_id = $1`,
		`DELETE FROM etl_chunked_job_queue WHERE job_record_id = $1`,
	} {
		if tag, err := tx.Exec(ctx, sql, id); err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("succeed chunked job: %v (%d rows)", err, tag.RowsAffected())
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}
