package intake

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/pg"
)

// TestParseSchedule pins the header rules shared by HTTP and NATS: at most
// one value each; a priority is one digit 1..4; a notBefore is RFC 3339
// with "T", a "Z" or numeric offset and "." before a fraction.
func TestParseSchedule(t *testing.T) {
	t.Parallel()
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	ok := []struct {
		priority, notBefore []string
		want                Schedule
	}{
		{nil, nil, Schedule{}},
		{[]string{}, []string{}, Schedule{}},
		{[]string{"1"}, nil, Schedule{Priority: 1}},
		{[]string{"4"}, nil, Schedule{Priority: 4}},
		{nil, []string{"2030-01-02T03:04:05Z"}, Schedule{NotBefore: utc("2030-01-02T03:04:05Z")}},
		{nil, []string{"2030-01-02T03:04:05.123456789+02:00"}, Schedule{NotBefore: utc("2030-01-02T01:04:05.123456789Z")}},
		{[]string{"3"}, []string{"1999-12-31T23:59:59-05:30"}, Schedule{Priority: 3, NotBefore: utc("2000-01-01T05:29:59Z")}},
	}
	for _, c := range ok {
		got, err := ParseSchedule(c.priority, c.notBefore)
		if err != nil || got.Priority != c.want.Priority || !got.NotBefore.Equal(c.want.NotBefore) {
			t.Errorf("ParseSchedule(%q, %q) = %+v, %v; want %+v", c.priority, c.notBefore, got, err, c.want)
		}
	}
	for _, p := range [][]string{{""}, {"0"}, {"5"}, {"9"}, {"-1"}, {"+1"}, {" 1"}, {"1 "}, {"01"}, {"12"}, {"a"}, {"1", "1"}, {"1", "2"}, {"١"}} {
		if _, err := ParseSchedule(p, nil); !errors.Is(err, ErrInvalidPriority) {
			t.Errorf("priority %q: %v, want ErrInvalidPriority", p, err)
		}
	}
	for _, v := range [][]string{
		{""}, {"2030-01-02"}, {"2030-01-02T03:04:05"}, {"2030-01-02 03:04:05Z"}, {"2030-01-02t03:04:05Z"},
		{"2030-01-02T03:04:05z"}, {"2030-01-02T03:04:05,5Z"}, {"2030-01-02T03:04:05+0200"}, {"2030-13-02T03:04:05Z"},
		{"2030-01-02T25:04:05Z"}, {"2030-01-02T03:04:05+24:00"}, {"2030-01-02T03:04:05-23:60"}, {"1767225600"}, {"tomorrow"},
		{"2030-01-02T03:04:05." + strings.Repeat("1", 30) + "Z"},
		{"2030-01-02T03:04:05Z", "2030-01-02T03:04:05Z"},
	} {
		if _, err := ParseSchedule(nil, v); !errors.Is(err, ErrInvalidNotBefore) {
			t.Errorf("notBefore %q: %v, want ErrInvalidNotBefore", v, err)
		}
	}
}

// FuzzParseSchedule: any header values either parse into a priority 0..4
// and a notBefore that formats back to an instant equal to itself, or fail
// with one of the two schedule codes; never a panic.
func FuzzParseSchedule(f *testing.F) {
	for _, s := range []string{"1", "4", "0", "", "2030-01-02T03:04:05Z", "2030-01-02T03:04:05.5+01:00", "x"} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, priority, notBefore string) {
		s, err := ParseSchedule([]string{priority}, []string{notBefore})
		if err != nil {
			if !errors.Is(err, ErrInvalidPriority) && !errors.Is(err, ErrInvalidNotBefore) {
				t.Fatalf("error %v", err)
			}
			return
		}
		if s.Priority < pg.HighestPriority || s.Priority > pg.LowestPriority {
			t.Fatalf("priority %d from %q", s.Priority, priority)
		}
		back, err := time.Parse(time.RFC3339Nano, s.NotBefore.Format(time.RFC3339Nano))
		if err != nil || !back.Equal(s.NotBefore) {
			t.Fatalf("notBefore %q -> %v -> %v %v", notBefore, s.NotBefore, back, err)
		}
	})
}

// TestSubmitScheduleRules: a priority outside 1..4 or a notBefore past the
// horizon is refused before anything is written; within it, the job keeps
// its schedule (truncated to microseconds); a resubmission with another
// schedule answers the first job with the first schedule; the list filters
// by priority.
func TestSubmitScheduleRules(t *testing.T) {
	t.Parallel()
	s, db := newService(t, func(o *Options) { o.MaxScheduleHorizon = time.Hour })
	ctx := context.Background()
	submit := func(key string, sc Schedule) (SubmitResult, error) {
		return s.Submit(ctx, SubmitRequest{Principal: "alice", IdempotencyKey: key, Body: []byte(body), Schedule: sc})
	}
	for _, c := range []struct {
		sc   Schedule
		want error
	}{
		{Schedule{Priority: 5}, ErrInvalidPriority},
		{Schedule{Priority: -1}, ErrInvalidPriority},
		{Schedule{NotBefore: time.Now().Add(2 * time.Hour)}, ErrInvalidNotBefore},
	} {
		if _, err := submit("schedule-key-refused-01", c.sc); !errors.Is(err, c.want) {
			t.Errorf("%+v: %v, want %v", c.sc, err, c.want)
		}
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM etl_job_records`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d jobs after refusals (%v)", n, err)
	}
	at := time.Now().Add(30 * time.Minute)
	res, err := submit("schedule-key-0000000001", Schedule{Priority: 1, NotBefore: at})
	if err != nil || res.Replayed {
		t.Fatal(res, err)
	}
	if res.Job.Priority != 1 || !res.Job.NotBefore.Equal(at.Truncate(time.Microsecond)) || res.Job.Status != pg.StatusPending {
		t.Errorf("scheduled job %+v, want priority 1 not before %v", res.Job, at)
	}
	v := NewJobView(res.Job)
	if v.Priority != 1 || v.NotBefore != FormatTime(at) {
		t.Errorf("view %+v", v)
	}
	again, err := submit("schedule-key-0000000001", Schedule{Priority: 4})
	if err != nil || !again.Replayed || again.Job.JobID != res.Job.JobID || again.Job.Priority != 1 || again.Job.NotBefore.IsZero() {
		t.Errorf("resubmission %+v %v, want the first job and schedule", again, err)
	}
	if _, err := submit("schedule-key-0000000002", Schedule{}); err != nil {
		t.Fatal(err)
	}
	page, err := s.List(ctx, ListRequest{Principal: "alice", Priority: 1})
	if err != nil || len(page.Jobs) != 1 || page.Jobs[0].JobID != res.Job.JobID {
		t.Errorf("list priority 1: %+v %v", page, err)
	}
	if _, err := s.List(ctx, ListRequest{Principal: "alice", Priority: 5}); !errors.Is(err, ErrInvalidPriorityFilter) {
		t.Errorf("list priority 5: %v", err)
	}
}

// TestETagCoversTheSchedule: a job of priority 2 without a notBefore has
// the contract's tag; another priority, or a notBefore, changes it, and the
// notBefore's passing changes it again.
func TestETagCoversTheSchedule(t *testing.T) {
	t.Parallel()
	base := JobView{JobRecordID: "01900000-0000-7000-8000-000000000000", JobStatus: pg.StatusPending,
		CreatedAt: "2030-01-01T00:00:00.000000Z", UpdatedAt: "2030-01-01T00:00:00.000000Z"}
	plain := base
	plain.Priority = pg.DefaultPriority
	if plain.ETag() != base.ETag() {
		t.Error("priority 2 changed the contract's tag")
	}
	urgent := plain
	urgent.Priority = 1
	scheduled := plain
	scheduled.NotBefore = "2030-01-02T00:00:00.000000Z"
	tags := map[string]bool{plain.ETag(): true, urgent.ETag(): true, scheduled.ETag(): true}
	if len(tags) != 3 {
		t.Errorf("%d distinct tags for three representations", len(tags))
	}
}
