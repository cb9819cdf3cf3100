package pg_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// sqlRow is one row to insert by raw SQL: column name to value (nil is NULL).
type sqlRow map[string]any

// with returns a copy of r with the given column/value pairs set.
func (r sqlRow) with(kv ...any) sqlRow {
	c := maps.Clone(r)
	for i := 0; i < len(kv); i += 2 {
		c[kv[i].(string)] = kv[i+1]
	}
	return c
}

func insertSQLRow(ctx context.Context, pool *pgxpool.Pool, table string, r sqlRow) error {
	cols := slices.Sorted(maps.Keys(r))
	idents := make([]string, len(cols))
	params := make([]string, len(cols))
	args := make([]any, len(cols))
	for i, c := range cols {
		idents[i] = pgx.Identifier{c}.Sanitize()
		params[i] = fmt.Sprintf("$%d", i+1)
		args[i] = r[c]
	}
	_, err := pool.Exec(ctx, fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s)",
		pgx.Identifier{table}.Sanitize(), strings.Join(idents, ", "), strings.Join(params, ", ")), args...)
	return err
}

func hex64(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// sha32 is the SHA-256 of s as the 32 bytes the identity digest columns of
// etl_job_records hold (domain etl_sha256_digest, migration 00014).
func sha32(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// A fixed instant: these rows test shapes, not time, so no clock is read.
var fixedInstant = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

const (
	leaseOwnerOK  = "worker-0001.example:a"
	failureCodeOK = "etl_handler_failed"
	cancelCodeOK  = "etl_job_cancelled_by_owner"
)

var allStatuses = []string{"PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"}

var leaseColumns = []string{"lease_claim_id", "lease_owner_id", "lease_expires_at", "lease_fencing_token"}

var cancellationColumns = []string{"cancellation_key_hash", "cancellation_code", "job_cancelled_at"}

// validColumnValue is a well-formed value of each optional column.
func validColumnValue(col string) any {
	switch col {
	case "lease_claim_id":
		return uuid.New()
	case "lease_owner_id":
		return leaseOwnerOK
	case "lease_expires_at", "job_cancelled_at":
		return fixedInstant
	case "lease_fencing_token":
		return int64(42)
	case "cancellation_key_hash":
		return hex64("cancel-key")
	case "cancellation_code":
		return cancelCodeOK
	case "failure_code":
		return failureCodeOK
	case "request_payload":
		return `{"durationMillis":0,"records":[]}`
	}
	panic("no valid value for " + col)
}

// baseJobRow is one valid row in state status. Every column is present (NULL
// where the state forbids it) so that a case overrides exactly one thing.
func baseJobRow(status string) sqlRow {
	payload := `{"durationMillis":0,"records":[]}`
	r := sqlRow{
		"job_record_id":         uuid.New(),
		"job_kind":              "diagnostic",
		"principal_scope_hash":  sha32("owner"),
		"submission_key_hash":   sha32(uuid.NewString()),
		"request_digest":        sha32(payload),
		"request_payload":       nil,
		"job_status":            status,
		"attempt_count":         1,
		"max_attempts":          3,
		"lease_claim_id":        nil,
		"lease_owner_id":        nil,
		"lease_expires_at":      nil,
		"lease_fencing_token":   nil,
		"failure_code":          nil,
		"cancellation_key_hash": nil,
		"cancellation_code":     nil,
		"job_cancelled_at":      nil,
	}
	switch status {
	case "PENDING":
		r["request_payload"] = payload
		r["attempt_count"] = 0
	case "RUNNING":
		r["request_payload"] = payload
		for _, c := range leaseColumns {
			r[c] = validColumnValue(c)
		}
	case "SUCCEEDED":
	case "FAILED":
		r["failure_code"] = failureCodeOK
	case "CANCELLED":
		for _, c := range cancellationColumns {
			r[c] = validColumnValue(c)
		}
	default:
		panic(status)
	}
	return r
}

type rowCase struct {
	name string
	row  sqlRow
	// code is the expected SQLSTATE; empty means the insert must succeed.
	code string
	// constraint is the expected violated constraint (23514, 23505), or the
	// column for 23502.
	constraint string
}

func badHashes() map[string]string {
	return map[string]string{
		"uppercase":        strings.Repeat("A", 64),
		"63 chars":         strings.Repeat("a", 63),
		"65 chars":         strings.Repeat("a", 65),
		"non-hex":          strings.Repeat("a", 63) + "g",
		"empty":            "",
		"trailing newline": strings.Repeat("a", 64) + "\n",
		"leading space":    " " + strings.Repeat("a", 63),
	}
}

// digestColumns are the identity digests of etl_job_records: 32-byte bytea
// (domain etl_sha256_digest) since migration 00014.
var digestColumns = []string{"principal_scope_hash", "submission_key_hash", "request_digest"}

// badDigests are byte strings etl_sha256_digest_length_check refuses, among
// them the 64 bytes of a hex digest's text (the former column format).
func badDigests() map[string][]byte {
	return map[string][]byte{
		"31 bytes":       make([]byte, 31),
		"33 bytes":       make([]byte, 33),
		"empty":          {},
		"hex text bytes": []byte(hex64("x")),
	}
}

func jobRowCases() []rowCase {
	var cs []rowCase
	add := func(name string, r sqlRow, constraint string) {
		cs = append(cs, rowCase{name: name, row: r, code: "23514", constraint: constraint})
	}
	ok := func(name string, r sqlRow) { cs = append(cs, rowCase{name: name, row: r}) }

	// Payload iff PENDING/RUNNING.
	for _, s := range []string{"SUCCEEDED", "FAILED", "CANCELLED"} {
		add("payload present on "+s, baseJobRow(s).with("request_payload", validColumnValue("request_payload")), "etl_job_payload_lifecycle_check")
	}
	for _, s := range []string{"PENDING", "RUNNING"} {
		add("payload missing on "+s, baseJobRow(s).with("request_payload", nil), "etl_job_payload_lifecycle_check")
	}

	// Every lease column iff RUNNING (and a RUNNING row has an attempt).
	for _, c := range leaseColumns {
		add("RUNNING without "+c, baseJobRow("RUNNING").with(c, nil), "etl_job_lease_lifecycle_check")
		for _, s := range []string{"PENDING", "SUCCEEDED", "FAILED", "CANCELLED"} {
			add(c+" on "+s, baseJobRow(s).with(c, validColumnValue(c)), "etl_job_lease_lifecycle_check")
		}
	}
	add("RUNNING with attempt_count 0", baseJobRow("RUNNING").with("attempt_count", 0), "etl_job_lease_lifecycle_check")

	// failure_code iff FAILED.
	for _, s := range []string{"PENDING", "RUNNING", "SUCCEEDED", "CANCELLED"} {
		add("failure_code on "+s, baseJobRow(s).with("failure_code", failureCodeOK), "etl_job_failure_lifecycle_check")
	}
	add("FAILED without failure_code", baseJobRow("FAILED").with("failure_code", nil), "etl_job_failure_lifecycle_check")

	// Cancellation columns all iff CANCELLED.
	for _, c := range cancellationColumns {
		add("CANCELLED without "+c, baseJobRow("CANCELLED").with(c, nil), "etl_job_cancellation_lifecycle_check")
		for _, s := range []string{"PENDING", "RUNNING", "SUCCEEDED", "FAILED"} {
			add(c+" on "+s, baseJobRow(s).with(c, validColumnValue(c)), "etl_job_cancellation_lifecycle_check")
		}
	}
	add("all cancellation columns on PENDING", baseJobRow("PENDING").with(
		"cancellation_key_hash", hex64("k"), "cancellation_code", cancelCodeOK, "job_cancelled_at", fixedInstant),
		"etl_job_cancellation_lifecycle_check")
	for _, code := range []string{"etl_job_cancelled_by_admin", "ETL_JOB_CANCELLED_BY_OWNER", ""} {
		add(fmt.Sprintf("cancellation_code %q", code), baseJobRow("CANCELLED").with("cancellation_code", code), "etl_job_cancellation_code_check")
	}

	// Hash formats. cancellation_key_hash is 64-character lowercase hex text;
	// the identity digests are exactly 32 bytes (migration 00014, domain
	// etl_sha256_digest).
	for _, what := range slices.Sorted(maps.Keys(badHashes())) {
		add("cancellation_key_hash "+what, baseJobRow("CANCELLED").with("cancellation_key_hash", badHashes()[what]),
			"etl_job_cancellation_key_hash_format_check")
	}
	for _, col := range digestColumns {
		for _, what := range slices.Sorted(maps.Keys(badDigests())) {
			add(col+" "+what, baseJobRow("CANCELLED").with(col, badDigests()[what]), "etl_sha256_digest_length_check")
		}
		ok(col+" 32 zero bytes", baseJobRow("CANCELLED").with(col, make([]byte, 32)))
	}

	// Attempts.
	add("max_attempts 0", baseJobRow("PENDING").with("max_attempts", 0), "etl_job_max_attempts_range_check")
	add("max_attempts 101", baseJobRow("PENDING").with("max_attempts", 101), "etl_job_max_attempts_range_check")
	add("attempt_count > max_attempts", baseJobRow("PENDING").with("attempt_count", 4, "max_attempts", 3), "etl_job_attempt_count_range_check")
	add("attempt_count > max_attempts on RUNNING", baseJobRow("RUNNING").with("attempt_count", 2, "max_attempts", 1), "etl_job_attempt_count_range_check")
	add("attempt_count -1", baseJobRow("PENDING").with("attempt_count", -1), "etl_job_attempt_count_range_check")
	ok("max_attempts 1", baseJobRow("PENDING").with("max_attempts", 1))
	ok("max_attempts 100", baseJobRow("PENDING").with("max_attempts", 100))
	ok("attempt_count == max_attempts", baseJobRow("RUNNING").with("attempt_count", 3, "max_attempts", 3))

	// Kind and status.
	for _, k := range []string{"shell", "ETL_RECORDS", "Diagnostic", ""} {
		add(fmt.Sprintf("job_kind %q", k), baseJobRow("PENDING").with("job_kind", k), "etl_job_kind_check")
	}
	ok("job_kind etl_records", baseJobRow("PENDING").with("job_kind", "etl_records"))
	// From SUCCEEDED (no payload, lease, failure or cancellation) an unknown
	// status breaks only the status check.
	for _, s := range []string{"succeeded", "UNKNOWN", "CANCELED", ""} {
		add(fmt.Sprintf("job_status %q", s), baseJobRow("SUCCEEDED").with("job_status", s), "etl_job_status_check")
	}

	// lease_owner_id format ^[A-Za-z0-9._:-]{8,128}$.
	for name, owner := range map[string]string{
		"7 chars":          "worker7",
		"129 chars":        strings.Repeat("w", 129),
		"space":            "worker 0001",
		"slash":            "worker/0001",
		"non-ascii":        "wörker-0001",
		"trailing newline": "worker-0001\n",
	} {
		add("lease_owner_id "+name, baseJobRow("RUNNING").with("lease_owner_id", owner), "etl_job_lease_owner_format_check")
	}
	ok("lease_owner_id 8 chars", baseJobRow("RUNNING").with("lease_owner_id", "w0rker-1"))
	ok("lease_owner_id 128 chars", baseJobRow("RUNNING").with("lease_owner_id", strings.Repeat("w", 128)))

	// failure_code format ^[a-z][a-z0-9_]{2,127}$.
	for name, code := range map[string]string{
		"uppercase":        "Etl_failed",
		"leading digit":    "1etl_failed",
		"leading _":        "_etl_failed",
		"2 chars":          "ab",
		"dash":             "etl-failed",
		"space":            "etl failed",
		"129 chars":        "e" + strings.Repeat("x", 128),
		"empty":            "",
		"trailing newline": "etl_failed\n",
	} {
		add("failure_code "+name, baseJobRow("FAILED").with("failure_code", code), "etl_job_failure_code_format_check")
	}
	ok("failure_code 3 chars", baseJobRow("FAILED").with("failure_code", "abc"))
	ok("failure_code 128 chars", baseJobRow("FAILED").with("failure_code", "e"+strings.Repeat("x", 127)))

	// NOT NULL columns.
	for _, col := range []string{"job_kind", "principal_scope_hash", "submission_key_hash", "request_digest", "job_status", "attempt_count", "max_attempts"} {
		cs = append(cs, rowCase{name: col + " NULL", row: baseJobRow("SUCCEEDED").with(col, nil), code: "23502", constraint: col})
	}
	return cs
}

func assertRowOutcome(t *testing.T, err error, c rowCase) {
	t.Helper()
	if c.code == "" {
		if err != nil {
			t.Fatalf("valid row rejected: %v", err)
		}
		return
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		t.Fatalf("insert error %v, want SQLSTATE %s (%s)", err, c.code, c.constraint)
	}
	got := pgErr.ConstraintName
	if c.code == "23502" {
		got = pgErr.ColumnName
	}
	if pgErr.Code != c.code || got != c.constraint {
		t.Fatalf("insert failed with %s %q (%s), want %s %q", pgErr.Code, got, pgErr.Message, c.code, c.constraint)
	}
}

func TestJobRecordLifecycleConstraints(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()

	valid := 0
	t.Run("valid base rows", func(t *testing.T) {
		for _, s := range allStatuses {
			t.Run(s, func(t *testing.T) {
				if err := insertSQLRow(ctx, pool, "etl_job_records", baseJobRow(s)); err != nil {
					t.Fatalf("valid %s row rejected: %v", s, err)
				}
				valid++
			})
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	for _, c := range jobRowCases() {
		t.Run(c.name, func(t *testing.T) {
			err := insertSQLRow(ctx, pool, "etl_job_records", c.row)
			assertRowOutcome(t, err, c)
			if err == nil {
				valid++
			}
		})
	}

	// Rejected inserts left nothing behind.
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM etl_job_records`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != valid {
		t.Fatalf("table holds %d rows, want the %d valid ones", n, valid)
	}
}

func TestJobRecordUniqueness(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	first := baseJobRow("PENDING")
	if err := insertSQLRow(ctx, pool, "etl_job_records", first); err != nil {
		t.Fatal(err)
	}
	cases := []rowCase{
		{name: "same principal and submission key", code: "23505", constraint: "etl_job_submission_key_unique",
			row: baseJobRow("SUCCEEDED").with("principal_scope_hash", first["principal_scope_hash"], "submission_key_hash", first["submission_key_hash"])},
		{name: "same job id", code: "23505", constraint: "etl_job_records_pkey",
			row: baseJobRow("PENDING").with("job_record_id", first["job_record_id"])},
		{name: "same submission key, other principal",
			row: baseJobRow("PENDING").with("principal_scope_hash", sha32("other owner"), "submission_key_hash", first["submission_key_hash"])},
		{name: "same principal, other submission key",
			row: baseJobRow("PENDING").with("principal_scope_hash", first["principal_scope_hash"])},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assertRowOutcome(t, insertSQLRow(ctx, pool, "etl_job_records", c.row), c)
		})
	}
}

func TestOutboxEventConstraints(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	job := uuid.New()
	base := sqlRow{"event_kind": "job_lifecycle", "job_record_id": job, "job_status": "SUCCEEDED", "attempt_count": 1, "event_code": nil}
	cases := []rowCase{
		{name: "valid job_lifecycle", row: base},
		{name: "valid job_available", row: base.with("event_kind", "job_available", "job_status", "PENDING", "attempt_count", 0)},
		{name: "valid lease_revoked", row: base.with("event_kind", "lease_revoked", "job_status", "CANCELLED", "event_code", cancelCodeOK)},
		{name: "valid job_lifecycle with code", row: base.with("job_status", "FAILED", "event_code", "etl_worker_attempts_exhausted")},
		{name: "valid bare job_available", row: sqlRow{"event_kind": "job_available"}},
		{name: "valid 3-char code", row: base.with("event_code", "abc")},
	}
	for _, k := range []string{"job_created", "JOB_LIFECYCLE", ""} {
		cases = append(cases, rowCase{name: fmt.Sprintf("event_kind %q", k), row: base.with("event_kind", k), code: "23514", constraint: "etl_outbox_event_kind_check"})
	}
	for name, code := range map[string]string{
		"uppercase": "Etl_failed", "leading digit": "1abc", "2 chars": "ab", "dash": "etl-failed",
		"129 chars": "e" + strings.Repeat("x", 128), "empty": "",
	} {
		cases = append(cases, rowCase{name: "event_code " + name, row: base.with("event_code", code), code: "23514", constraint: "etl_outbox_event_code_format_check"})
	}
	cases = append(cases,
		rowCase{name: "job_lifecycle without job id", row: base.with("job_record_id", nil), code: "23514", constraint: "etl_outbox_lifecycle_shape_check"},
		rowCase{name: "job_lifecycle without status", row: base.with("job_status", nil), code: "23514", constraint: "etl_outbox_lifecycle_shape_check"},
		rowCase{name: "event_kind NULL", row: base.with("event_kind", nil), code: "23502", constraint: "event_kind"},
	)
	valid := 0
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := insertSQLRow(ctx, pool, "etl_outbox_events", c.row)
			assertRowOutcome(t, err, c)
			if err == nil {
				valid++
			}
		})
	}
	t.Run("explicit outbox_event_id", func(t *testing.T) {
		err := insertSQLRow(ctx, pool, "etl_outbox_events", base.with("outbox_event_id", int64(1_000_000)))
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "428C9" {
			t.Fatalf("explicit identity value: %v, want 428C9", err)
		}
	})
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM etl_outbox_events`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != valid {
		t.Fatalf("outbox holds %d rows, want %d", n, valid)
	}
}

func TestIdempotencyRecordConstraints(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	first := sqlRow{"principal_scope_hash": hex64("owner"), "idempotency_key_hash": hex64("key-1"),
		"request_digest": hex64("body"), "response_text": "{}", "job_record_id": uuid.New()}
	if err := insertSQLRow(ctx, pool, "etl_idempotency_records", first); err != nil {
		t.Fatalf("valid ledger row rejected: %v", err)
	}
	next := func() sqlRow {
		return first.with("idempotency_key_hash", hex64(uuid.NewString()), "job_record_id", uuid.New())
	}
	cases := []rowCase{
		{name: "valid synchronous row", row: next().with("job_record_id", nil)},
		{name: "second synchronous row", row: next().with("job_record_id", nil)},
		{name: "same key other principal", row: next().with("idempotency_key_hash", first["idempotency_key_hash"], "principal_scope_hash", hex64("other"))},
		{name: "same principal and key", row: next().with("idempotency_key_hash", first["idempotency_key_hash"]), code: "23505", constraint: "etl_idempotency_records_pkey"},
		{name: "same job", row: next().with("job_record_id", first["job_record_id"]), code: "23505", constraint: "etl_idempotency_job_record_unique"},
	}
	hashCols := map[string]string{
		"principal_scope_hash": "etl_idempotency_principal_scope_hash_format_check",
		"idempotency_key_hash": "etl_idempotency_key_hash_format_check",
		"request_digest":       "etl_idempotency_request_digest_format_check",
	}
	for _, col := range slices.Sorted(maps.Keys(hashCols)) {
		for _, what := range slices.Sorted(maps.Keys(badHashes())) {
			cases = append(cases, rowCase{name: col + " " + what, row: next().with(col, badHashes()[what]), code: "23514", constraint: hashCols[col]})
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assertRowOutcome(t, insertSQLRow(ctx, pool, "etl_idempotency_records", c.row), c)
		})
	}
}
