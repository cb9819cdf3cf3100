package config

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/console"
	"github.com/mightyetl/mightyetl/internal/httpapi"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/worker"
)

// Bounds of intake settings that are configuration's own (a setting's
// default and ceiling that a part applies are that part's constants, named
// at registration: intake.DefaultMaxPayloadBytes, httpapi.DefaultAddr, ...).
const (
	// MaxInFlightBytesCeiling is the highest accepted
	// MIGHTYETL_INTAKE_MAX_INFLIGHT_BYTES: 1 GiB (default
	// httpapi.DefaultMaxInFlightBytes).
	MaxInFlightBytesCeiling = 1 << 30
	// MinPrincipalHashKeyBytes is the shortest accepted MIGHTYETL_PRINCIPAL_HASH_KEY.
	MinPrincipalHashKeyBytes = 32
	// MinScheduleHorizon and MaxScheduleHorizonCeiling bound
	// MIGHTYETL_MAX_SCHEDULE_HORIZON (default
	// intake.DefaultMaxScheduleHorizon, 30 days).
	MinScheduleHorizon        = time.Minute
	MaxScheduleHorizonCeiling = 365 * 24 * time.Hour
)

// Intake defaults that belong to no part's options (the others are the
// parts' own Default* constants, named at registration).
const (
	// DefaultShutdownGrace is MIGHTYETL_SHUTDOWN_GRACE_PERIOD's default.
	DefaultShutdownGrace = 30 * time.Second
	// DefaultIntakeStatementTimeout is MIGHTYETL_INTAKE_STATEMENT_TIMEOUT's
	// default.
	DefaultIntakeStatementTimeout = 30 * time.Second
	// DefaultIntakePoolSize is MIGHTYETL_INTAKE_POOL_SIZE's default.
	DefaultIntakePoolSize = 8
)

// Intake is the intake binary's configuration. Durations are Go syntax.
type Intake struct {
	DatabaseURL           string        // DATABASE_URL, default postgres://postgres@127.0.0.1:5432/mightyetl
	Database              Database      // MIGHTYETL_DATABASE_POOLER, MIGHTYETL_DATABASE_DIRECT_URL
	HTTPAddr              string        // MIGHTYETL_HTTP_ADDR, default 127.0.0.1:8080
	AuthMode              auth.Mode     // MIGHTYETL_AUTH_MODE: deny (default) | basic | jwt
	BasicCredentialsFile  string        // MIGHTYETL_BASIC_CREDENTIALS_FILE, required for basic
	Basic                 BasicLimits   // MIGHTYETL_BASIC_* rationing and MIGHTYETL_TRUSTED_PROXIES (basic mode)
	JWTIssuer             string        // MIGHTYETL_JWT_ISSUER, required for jwt
	JWTAudience           string        // MIGHTYETL_JWT_AUDIENCE, required for jwt
	JWTJWKSFile           string        // MIGHTYETL_JWT_JWKS_FILE: jwt mode needs it or JWTJWKSURL
	JWTJWKSURL            string        // MIGHTYETL_JWT_JWKS_URL: the identity provider's JWK Set (https; http to loopback only)
	JWTJWKSRefresh        time.Duration // MIGHTYETL_JWT_JWKS_REFRESH_INTERVAL, default 5m (1m..24h): age after which JWTJWKSURL is fetched again
	PrincipalHashKey      string        // MIGHTYETL_PRINCIPAL_HASH_KEY (secret), ≥ 32 bytes whenever IntakeOpen
	MaxPayloadBytes       int           // MIGHTYETL_MAX_PAYLOAD_BYTES, default 1 MiB (1..64 MiB)
	MaxBatchRecords       int           // MIGHTYETL_MAX_BATCH_RECORDS, default 1000 (1..100000)
	MaxAttempts           int           // MIGHTYETL_MAX_ATTEMPTS, default 3 (1..100)
	DiagnosticJobsEnabled bool          // MIGHTYETL_DIAGNOSTIC_JOBS_ENABLED, default false
	WorkerPollInterval    time.Duration // MIGHTYETL_WORKER_POLL_INTERVAL, default 1s: Retry-After hint
	ShutdownGrace         time.Duration // MIGHTYETL_SHUTDOWN_GRACE_PERIOD, default 30s
	MaxInFlightBytes      int           // MIGHTYETL_INTAKE_MAX_INFLIGHT_BYTES, default 64 MiB (≥ MaxPayloadBytes, ≤ 1 GiB): request body bytes held at once
	StatementTimeout      time.Duration // MIGHTYETL_INTAKE_STATEMENT_TIMEOUT, default 30s (100ms..1h): statement_timeout of the intake's pools
	PoolSize              int           // MIGHTYETL_INTAKE_POOL_SIZE, default 8 (2..1000): request pool connections; /process may use half
	NATS                  NATS          // NATS_URL and friends: outbox relay and request consumer
	ConsoleEnabled        bool          // MIGHTYETL_CONSOLE_ENABLED, default true: serve /console/ and /api/ops/
	ConsoleBulkCancelCap  int           // MIGHTYETL_CONSOLE_BULK_CANCEL_CAP, default 100 (1..1000): most jobs one bulk cancel cancels
	OperatorPrincipals    []string      // MIGHTYETL_OPERATOR_PRINCIPALS: comma-separated operator principals
	JWTOperatorClaim      string        // MIGHTYETL_JWT_OPERATOR_CLAIM: claim naming operators (jwt mode), with JWTOperatorValue
	JWTOperatorValue      string        // MIGHTYETL_JWT_OPERATOR_VALUE: value of JWTOperatorClaim that makes an operator
	Uploads               Uploads       // MIGHTYETL_UPLOAD_*: large-job upload limits
	Owners                OwnerQuotas   // MIGHTYETL_OWNER_*: per-owner quotas, overrides and claim weights
	MaxScheduleHorizon    time.Duration // MIGHTYETL_MAX_SCHEDULE_HORIZON, default 720h (1m..8760h): how far ahead a Mightyetl-Not-Before may lie
}

// Bounds of the upload settings (their defaults are intake's
// DefaultUpload* constants).
const (
	// MaxUploadBytesCeiling is the highest MIGHTYETL_UPLOAD_MAX_BYTES and
	// MIGHTYETL_UPLOAD_OWNER_MAX_STAGED_BYTES: 4 TiB.
	MaxUploadBytesCeiling = 4 << 40
	// MinUploadPartBytes is the lowest MIGHTYETL_UPLOAD_MAX_PART_BYTES (and
	// MIGHTYETL_UPLOAD_MAX_BYTES): 1 MiB.
	MinUploadPartBytes = 1 << 20
	// MaxUploadPartBytesCeiling is the highest
	// MIGHTYETL_UPLOAD_MAX_PART_BYTES: 1 GiB (a part is streamed, never held;
	// the ceiling bounds one request's duration).
	MaxUploadPartBytesCeiling = 1 << 30
	// MaxUploadRecordsCeiling is the highest MIGHTYETL_UPLOAD_MAX_RECORDS.
	MaxUploadRecordsCeiling = 100_000_000_000
)

// Uploads are the large-job upload limits of the intake.
type Uploads struct {
	MaxBytes            int           // MIGHTYETL_UPLOAD_MAX_BYTES, default 10 GiB (1 MiB..4 TiB): one upload's payload
	MaxRecords          int           // MIGHTYETL_UPLOAD_MAX_RECORDS, default 100,000,000 (1..100,000,000,000): one upload's records
	MaxPartBytes        int           // MIGHTYETL_UPLOAD_MAX_PART_BYTES, default 64 MiB (1 MiB..1 GiB, ≤ MaxBytes): one part
	OwnerMaxStagedBytes int           // MIGHTYETL_UPLOAD_OWNER_MAX_STAGED_BYTES, default 20 GiB (1 MiB..4 TiB, ≥ MaxPartBytes): one owner's OPEN uploads
	Expiry              time.Duration // MIGHTYETL_UPLOAD_EXPIRY, default 24h (1m..720h): an OPEN upload's life after its creation or last part
}

// RegisterUploads registers the upload settings on l into dst.
func RegisterUploads(l *Loader, dst *Uploads) {
	l.Int(&dst.MaxBytes, "MIGHTYETL_UPLOAD_MAX_BYTES", "upload-max-bytes", intake.DefaultUploadMaxBytes, MinUploadPartBytes, MaxUploadBytesCeiling,
		"bytes of one large-job upload's payload (413 etl_upload_too_large beyond)")
	l.Int(&dst.MaxRecords, "MIGHTYETL_UPLOAD_MAX_RECORDS", "upload-max-records", intake.DefaultUploadMaxRecords, 1, MaxUploadRecordsCeiling,
		"records of one large-job upload (413 etl_upload_too_large beyond)")
	l.Int(&dst.MaxPartBytes, "MIGHTYETL_UPLOAD_MAX_PART_BYTES", "upload-max-part-bytes", intake.DefaultUploadMaxPartBytes, MinUploadPartBytes, MaxUploadPartBytesCeiling,
		"bytes of one upload part, as sent and decompressed (413 etl_upload_too_large beyond)")
	l.Int(&dst.OwnerMaxStagedBytes, "MIGHTYETL_UPLOAD_OWNER_MAX_STAGED_BYTES", "upload-owner-max-staged-bytes", intake.DefaultUploadOwnerMaxStagedBytes,
		MinUploadPartBytes, MaxUploadBytesCeiling, "bytes one owner's open uploads stage (413 etl_upload_owner_quota_exceeded beyond)")
	l.Duration(&dst.Expiry, "MIGHTYETL_UPLOAD_EXPIRY", "upload-expiry", intake.DefaultUploadExpiry, time.Minute, 720*time.Hour,
		"life of an open upload after its creation or its last part (then 410 etl_upload_expired, and pruned)")
}

// Validate checks the cross-setting rules: a part fits the upload, and one
// owner may stage at least one part.
func (u Uploads) Validate() error {
	if u.MaxPartBytes > u.MaxBytes {
		return fmt.Errorf("MIGHTYETL_UPLOAD_MAX_PART_BYTES: must be at most MIGHTYETL_UPLOAD_MAX_BYTES (%d)", u.MaxBytes)
	}
	if u.OwnerMaxStagedBytes < u.MaxPartBytes {
		return fmt.Errorf("MIGHTYETL_UPLOAD_OWNER_MAX_STAGED_BYTES: must be at least MIGHTYETL_UPLOAD_MAX_PART_BYTES (%d)", u.MaxPartBytes)
	}
	return nil
}

// Options are the intake's UploadOptions of u.
func (u Uploads) Options() intake.UploadOptions {
	return intake.UploadOptions{MaxBytes: int64(u.MaxBytes), MaxRecords: int64(u.MaxRecords), MaxPartBytes: int64(u.MaxPartBytes),
		OwnerMaxStagedBytes: int64(u.OwnerMaxStagedBytes), Expiry: u.Expiry}
}

// HTTPAddrSetting names the intake's listen address setting as listen
// errors show it: the variable and the flag.
const HTTPAddrSetting = "MIGHTYETL_HTTP_ADDR / --http-addr"

// RegisterIntake registers every intake setting on l into dst.
func RegisterIntake(l *Loader, dst *Intake) {
	l.String(&dst.DatabaseURL, "DATABASE_URL", "database-url", DefaultDatabaseURL, "PostgreSQL URL", nonEmpty)
	RegisterDatabase(l, &dst.Database)
	l.String(&dst.HTTPAddr, "MIGHTYETL_HTTP_ADDR", "http-addr", httpapi.DefaultAddr, "HTTP listen address", nonEmpty)
	var mode string
	l.String(&mode, "MIGHTYETL_AUTH_MODE", "auth-mode", string(auth.ModeDeny), "authentication: deny, basic or jwt", func(s string) error {
		m, err := auth.ParseMode(s)
		if err != nil {
			return errors.New("must be deny, basic or jwt")
		}
		dst.AuthMode = m
		return nil
	})
	l.String(&dst.BasicCredentialsFile, "MIGHTYETL_BASIC_CREDENTIALS_FILE", "basic-credentials-file", "", "principal:hash lines (basic mode)", nil)
	RegisterBasicLimits(l, &dst.Basic)
	l.String(&dst.JWTIssuer, "MIGHTYETL_JWT_ISSUER", "jwt-issuer", "", "required iss (jwt mode)", nil)
	l.String(&dst.JWTAudience, "MIGHTYETL_JWT_AUDIENCE", "jwt-audience", "", "required aud (jwt mode)", nil)
	l.String(&dst.JWTJWKSFile, "MIGHTYETL_JWT_JWKS_FILE", "jwt-jwks-file", "", "JWK Set of verification keys (jwt mode)", nil)
	l.String(&dst.JWTJWKSURL, "MIGHTYETL_JWT_JWKS_URL", "jwt-jwks-url", "", "identity provider's JWK Set URL, https (jwt mode; instead of the file)", func(s string) error {
		if s == "" {
			return nil
		}
		return auth.CheckJWKSURL(s)
	})
	l.Duration(&dst.JWTJWKSRefresh, "MIGHTYETL_JWT_JWKS_REFRESH_INTERVAL", "jwt-jwks-refresh-interval", auth.DefaultJWKSRefreshInterval, time.Minute, 24*time.Hour,
		"age after which the JWKS URL's keys are fetched again (jwt mode)")
	l.Secret(&dst.PrincipalHashKey, "MIGHTYETL_PRINCIPAL_HASH_KEY", "principal-hash-key", "key of principal_scope_hash (at least 32 bytes)", nil)
	l.Int(&dst.MaxPayloadBytes, "MIGHTYETL_MAX_PAYLOAD_BYTES", "max-payload-bytes", intake.DefaultMaxPayloadBytes, 1, intake.MaxPayloadBytesCeiling, "request body limit in bytes")
	l.Int(&dst.MaxBatchRecords, "MIGHTYETL_MAX_BATCH_RECORDS", "max-batch-records", intake.DefaultMaxBatchRecords, 1, 100000, "records per request")
	l.Int(&dst.MaxAttempts, "MIGHTYETL_MAX_ATTEMPTS", "max-attempts", intake.DefaultMaxAttempts, 1, 100, "attempts per job")
	l.Bool(&dst.DiagnosticJobsEnabled, "MIGHTYETL_DIAGNOSTIC_JOBS_ENABLED", "diagnostic-jobs", false, "serve POST /api/etl/diagnostic-jobs")
	l.Duration(&dst.WorkerPollInterval, "MIGHTYETL_WORKER_POLL_INTERVAL", "poll-interval", worker.DefaultPollInterval, 10*time.Millisecond, time.Hour, "worker poll interval (Retry-After hint)")
	l.Duration(&dst.ShutdownGrace, "MIGHTYETL_SHUTDOWN_GRACE_PERIOD", "shutdown-grace", DefaultShutdownGrace, 0, time.Hour, "wait for in-flight requests on shutdown")
	l.Int(&dst.MaxInFlightBytes, "MIGHTYETL_INTAKE_MAX_INFLIGHT_BYTES", "max-inflight-bytes", httpapi.DefaultMaxInFlightBytes, 1, MaxInFlightBytesCeiling, "request body bytes held at once across requests (503 etl_server_busy beyond)")
	l.Duration(&dst.StatementTimeout, "MIGHTYETL_INTAKE_STATEMENT_TIMEOUT", "statement-timeout", DefaultIntakeStatementTimeout, 100*time.Millisecond, time.Hour, "statement_timeout of the intake's database pools")
	l.Int(&dst.PoolSize, "MIGHTYETL_INTAKE_POOL_SIZE", "pool-size", DefaultIntakePoolSize, 2, 1000, "request pool connections (POST /api/etl/process may use half)")
	l.Bool(&dst.ConsoleEnabled, "MIGHTYETL_CONSOLE_ENABLED", "console", true, "serve the operator console (/console/, /api/ops/)")
	l.Int(&dst.ConsoleBulkCancelCap, "MIGHTYETL_CONSOLE_BULK_CANCEL_CAP", "console-bulk-cancel-cap", console.DefaultBulkCancelCap, 1, 1000, "most jobs one console bulk cancel cancels")
	// Secret: provenance logs show "(set)", never the principals.
	l.Secret(new(string), "MIGHTYETL_OPERATOR_PRINCIPALS", "operator-principals", "comma-separated principals allowed into the operator console", func(s string) error {
		dst.OperatorPrincipals = nil
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				dst.OperatorPrincipals = append(dst.OperatorPrincipals, p)
			}
		}
		return nil
	})
	l.String(&dst.JWTOperatorClaim, "MIGHTYETL_JWT_OPERATOR_CLAIM", "jwt-operator-claim", "", "JWT claim that marks operators (jwt mode), e.g. roles", nil)
	l.String(&dst.JWTOperatorValue, "MIGHTYETL_JWT_OPERATOR_VALUE", "jwt-operator-value", "", "value of the operator claim that makes an operator, e.g. mightyetl-operator", nil)
	RegisterUploads(l, &dst.Uploads)
	RegisterOwnerQuotas(l, &dst.Owners)
	l.Duration(&dst.MaxScheduleHorizon, "MIGHTYETL_MAX_SCHEDULE_HORIZON", "max-schedule-horizon", intake.DefaultMaxScheduleHorizon,
		MinScheduleHorizon, MaxScheduleHorizonCeiling, "how far ahead of the intake's clock a job may be scheduled (400 etl_invalid_not_before beyond)")
	RegisterNATS(l, &dst.NATS)
}

// LoadIntake parses args (without the program name) and the environment
// through getenv into a validated Intake. The error is one line naming the
// setting; the Loader reports provenance.
func LoadIntake(args []string, getenv func(string) string) (Intake, *Loader, error) {
	return LoadIntakeDev(args, getenv, nil)
}

// LoadIntakeDev is LoadIntake with the values `etlctl dev` chose, by
// variable name, in place of the defaults of the settings it names
// (Loader.DevDefaults: flags and variables still win; provenance says
// SourceDev).
func LoadIntakeDev(args []string, getenv func(string) string, dev map[string]string) (Intake, *Loader, error) {
	var c Intake
	l := NewLoader("intake", args, getenv)
	l.DevDefaults(dev)
	RegisterIntake(l, &c)
	if err := l.Parse(); err != nil {
		return c, l, err
	}
	if err := c.Validate(); err != nil {
		return c, l, err
	}
	return c, l, nil
}

// IntakeOpen reports whether any path can bring a principal's request into
// the intake: HTTP with an authentication mode other than deny, or the NATS
// request consumer.
func (c Intake) IntakeOpen() bool {
	return c.AuthMode != auth.ModeDeny || c.NATS.RequestsEnabled
}

// Validate checks cross-setting rules: basic mode needs a credentials file
// (and consistent rationing limits), jwt mode an issuer, an audience and
// exactly one of a JWKS file and a JWKS URL (the URL only in jwt mode);
// deny mode refuses the NATS
// request consumer (deny means no intake at all, and the consumer would
// otherwise take jobs); and whenever an intake path is open (IntakeOpen) the
// principal hash key must hold at least 32 bytes.
func (c Intake) Validate() error {
	if c.AuthMode == auth.ModeDeny && c.NATS.RequestsEnabled {
		return errors.New("MIGHTYETL_NATS_REQUESTS_ENABLED=true: refused with MIGHTYETL_AUTH_MODE=deny (deny takes no jobs on any path); set MIGHTYETL_AUTH_MODE to basic or jwt, or MIGHTYETL_NATS_REQUESTS_ENABLED=false")
	}
	switch c.AuthMode {
	case auth.ModeBasic:
		if c.BasicCredentialsFile == "" {
			return errors.New("MIGHTYETL_BASIC_CREDENTIALS_FILE: required when MIGHTYETL_AUTH_MODE=basic")
		}
		if err := c.Basic.Validate(); err != nil {
			return err
		}
	case auth.ModeJWT:
		for _, s := range []struct{ name, v string }{
			{"MIGHTYETL_JWT_ISSUER", c.JWTIssuer},
			{"MIGHTYETL_JWT_AUDIENCE", c.JWTAudience},
		} {
			if s.v == "" {
				return fmt.Errorf("%s: required when MIGHTYETL_AUTH_MODE=jwt", s.name)
			}
		}
		switch {
		case c.JWTJWKSFile == "" && c.JWTJWKSURL == "":
			return errors.New("MIGHTYETL_JWT_JWKS_FILE or MIGHTYETL_JWT_JWKS_URL: one is required when MIGHTYETL_AUTH_MODE=jwt")
		case c.JWTJWKSFile != "" && c.JWTJWKSURL != "":
			return errors.New("MIGHTYETL_JWT_JWKS_URL: set it or MIGHTYETL_JWT_JWKS_FILE, not both")
		}
	}
	if c.JWTJWKSURL != "" && c.AuthMode != auth.ModeJWT {
		return errors.New("MIGHTYETL_JWT_JWKS_URL: only used when MIGHTYETL_AUTH_MODE=jwt")
	}
	if (c.JWTOperatorClaim == "") != (c.JWTOperatorValue == "") {
		return errors.New("MIGHTYETL_JWT_OPERATOR_CLAIM and MIGHTYETL_JWT_OPERATOR_VALUE: set both or neither")
	}
	if c.JWTOperatorClaim != "" && c.AuthMode != auth.ModeJWT {
		return errors.New("MIGHTYETL_JWT_OPERATOR_CLAIM: only used when MIGHTYETL_AUTH_MODE=jwt")
	}
	if c.IntakeOpen() && len(c.PrincipalHashKey) < MinPrincipalHashKeyBytes {
		return fmt.Errorf("MIGHTYETL_PRINCIPAL_HASH_KEY: must be at least %d bytes when MIGHTYETL_AUTH_MODE=%s or MIGHTYETL_NATS_REQUESTS_ENABLED=true", MinPrincipalHashKeyBytes, c.AuthMode)
	}
	if c.MaxInFlightBytes < c.MaxPayloadBytes {
		return fmt.Errorf("MIGHTYETL_INTAKE_MAX_INFLIGHT_BYTES: must be at least MIGHTYETL_MAX_PAYLOAD_BYTES (%d)", c.MaxPayloadBytes)
	}
	if c.PrincipalHashKey != "" && len(c.PrincipalHashKey) < MinPrincipalHashKeyBytes {
		return fmt.Errorf("MIGHTYETL_PRINCIPAL_HASH_KEY: must be at least %d bytes", MinPrincipalHashKeyBytes)
	}
	if err := c.Uploads.Validate(); err != nil {
		return err
	}
	if err := c.Owners.Validate(); err != nil {
		return err
	}
	if err := c.NATS.ValidateRequests(c.MaxPayloadBytes); err != nil {
		return err
	}
	return c.NATS.Validate()
}

// Authenticator builds the configured authenticator; see AuthenticatorLog.
func (c Intake) Authenticator() (auth.Authenticator, error) { return c.AuthenticatorLog(nil) }

// AuthenticatorLog builds the configured authenticator with log for what
// it reports while it runs (failed fetches of a JWKS URL); nil discards.
// In jwt mode with a JWKS URL it fetches the URL once and fails when it
// cannot.
func (c Intake) AuthenticatorLog(log *slog.Logger) (auth.Authenticator, error) {
	switch c.AuthMode {
	case auth.ModeBasic:
		return auth.NewBasic(c.Basic.Options(c.BasicCredentialsFile))
	case auth.ModeJWT:
		return auth.NewJWT(auth.JWTOptions{Issuer: c.JWTIssuer, Audience: c.JWTAudience,
			JWKSFile: c.JWTJWKSFile, JWKSURL: c.JWTJWKSURL, RefreshInterval: c.JWTJWKSRefresh, Logger: log,
			OperatorClaim: c.JWTOperatorClaim, OperatorValue: c.JWTOperatorValue})
	}
	return auth.NewDeny(), nil
}
