package pg

import (
	"context"
	"fmt"

	"github.com/mightyetl/mightyetl/internal/tracing"
)

// submittedJobSQL reads the job that holds one (principal, key) pair,
// through the submission-key unique index (pairOf). No lock: a caller that
// finds nothing goes on to an insert whose ON CONFLICT decides.
var submittedJobSQL = `
SELECT ` + scheduleColumns + `, ` + jobColumns + `
FROM etl_job_records j
WHERE ` + pairOf("decode($1, 'hex')", "decode($2, 'hex')")

// FindSubmittedJob returns the job submitted by principalScopeHash under
// submissionKeyHash (both hex, as in NewJob), and ErrNotFound when there is
// none. Its RequestDigest and Kind tell whether a resubmission is the same
// request. It lets a caller whose request is expensive to repeat (an Object
// Store ingest, a redelivered NATS request) converge on the existing job
// before it does the work again; the insert's own conflict handling stays
// the authority for concurrent submissions.
func FindSubmittedJob(ctx context.Context, db DBTX, principalScopeHash, submissionKeyHash string) (Job, error) {
	j, err := scanScheduledJob(db.QueryRow(ctx, submittedJobSQL, principalScopeHash, submissionKeyHash))
	if IsNoRows(err) {
		return Job{}, ErrNotFound
	}
	if err != nil {
		return Job{}, fmt.Errorf("find submitted job: %w", err)
	}
	return j, nil
}

func init() {
	tracing.RegisterStatement("jobs.find_submitted", submittedJobSQL)
}
