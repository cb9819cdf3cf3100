package pgtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// Fixture defaults: what InsertJobs fills into a zero field of pg.NewJob.
const (
	// DefaultFixtureKind is the kind of a fixture job without one.
	DefaultFixtureKind = pg.KindETLRecords
	// DefaultFixturePayload is the payload of a fixture job without one (an
	// empty record batch).
	DefaultFixturePayload = "[]"
	// DefaultFixtureMaxAttempts is the attempt budget of a fixture job
	// without one.
	DefaultFixtureMaxAttempts = 3
	// DefaultFixtureOwner is the principal whose scope hash (SHA of it) a
	// fixture job without PrincipalScopeHash belongs to.
	DefaultFixtureOwner = "owner"
	// insertChunk keeps each fixture statement small.
	insertChunk = 500
)

// SHA returns the lowercase hex SHA-256 of s: a well-formed 64-character
// scope hash, submission-key hash or request digest for fixtures.
func SHA(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// InsertJobs inserts jobs as PENDING through the product statement
// (pg.InsertJobs), in chunks, and returns their ids in order. Zero fields
// take fixture values: Kind DefaultFixtureKind, Payload
// DefaultFixturePayload, MaxAttempts DefaultFixtureMaxAttempts,
// PrincipalScopeHash SHA(DefaultFixtureOwner), SubmissionKeyHash a fresh
// random key's hash, RequestDigest SHA(Payload). It fails t unless every job
// was created by this call.
func InsertJobs(t testing.TB, db pg.DBTX, jobs ...pg.NewJob) []uuid.UUID {
	t.Helper()
	filled := make([]pg.NewJob, len(jobs))
	for i, j := range jobs {
		if j.Kind == "" {
			j.Kind = DefaultFixtureKind
		}
		if j.Payload == "" {
			j.Payload = DefaultFixturePayload
		}
		if j.MaxAttempts == 0 {
			j.MaxAttempts = DefaultFixtureMaxAttempts
		}
		if j.PrincipalScopeHash == "" {
			j.PrincipalScopeHash = SHA(DefaultFixtureOwner)
		}
		if j.SubmissionKeyHash == "" {
			j.SubmissionKeyHash = SHA(uuid.NewString())
		}
		if j.RequestDigest == "" {
			j.RequestDigest = SHA(j.Payload)
		}
		filled[i] = j
	}
	ids := make([]uuid.UUID, 0, len(filled))
	for start := 0; start < len(filled); start += insertChunk {
		ins, err := pg.InsertJobs(context.Background(), db, filled[start:min(start+insertChunk, len(filled))])
		if err != nil {
			t.Fatalf("pgtest: insert jobs: %v", err)
		}
		for _, in := range ins {
			if !in.Created {
				t.Fatalf("pgtest: job %d not created (its submission key was taken)", len(ids))
			}
			ids = append(ids, in.JobID)
		}
	}
	// As the intake does after its group commit (migration 00013): the
	// job_available group row does not notify by itself.
	if err := pg.NotifyOutbox(context.Background(), db); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return ids
}

// InsertN inserts n jobs like like (see InsertJobs for the zero fields);
// each gets its own submission key, so like must have neither JobID nor
// SubmissionKeyHash.
func InsertN(t testing.TB, db pg.DBTX, n int, like pg.NewJob) []uuid.UUID {
	t.Helper()
	if like.JobID != uuid.Nil || like.SubmissionKeyHash != "" {
		t.Fatal("pgtest: InsertN: the template must not fix JobID or SubmissionKeyHash")
	}
	jobs := make([]pg.NewJob, n)
	for i := range jobs {
		jobs[i] = like
	}
	return InsertJobs(t, db, jobs...)
}

// ExpireLease moves the lease of RUNNING job id (and its claim-queue row)
// ago into the past by the database clock (ExpireLeaseSQL), as if it had
// run out: the next claim may take it. ago must be at least a microsecond.
// It fails t unless the job was RUNNING.
func ExpireLease(t testing.TB, db pg.DBTX, id uuid.UUID, ago time.Duration) {
	t.Helper()
	moveOne(t, db, ExpireLeaseSQL, id, ago, "expire lease", pg.StatusRunning)
}

// MakeAvailable moves the available_at of PENDING job id (and its
// claim-queue row) ago into the past by the database clock
// (MakeAvailableSQL). It fails t unless the job was PENDING.
func MakeAvailable(t testing.TB, db pg.DBTX, id uuid.UUID, ago time.Duration) {
	t.Helper()
	moveOne(t, db, MakeAvailableSQL, id, ago, "make available", pg.StatusPending)
}

// moveOne runs one of the pastEligibilitySQL statements for job id and
// fails t unless it moved that job (which must be in status).
func moveOne(t testing.TB, db pg.DBTX, sql string, id uuid.UUID, ago time.Duration, what, status string) {
	t.Helper()
	tag, err := db.Exec(context.Background(), sql, id, ago.Microseconds())
	if err != nil {
		t.Fatalf("pgtest: %s: %v", what, err)
	}
	if tag.RowsAffected() != 1 {
		t.Fatalf("pgtest: %s: the job is not %s", what, status)
	}
}

// ExpireAllLeases expires every RUNNING job's lease 1 ms ago by the
// database clock (ExpireAllLeasesSQL) and returns how many it expired.
func ExpireAllLeases(t testing.TB, db pg.DBTX) int64 {
	t.Helper()
	tag, err := db.Exec(context.Background(), ExpireAllLeasesSQL)
	if err != nil {
		t.Fatalf("pgtest: expire all leases: %v", err)
	}
	return tag.RowsAffected()
}
