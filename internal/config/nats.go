package config

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/natsbridge"
	"github.com/mightyetl/mightyetl/internal/outbox"
)

// NATS is the NATS and outbox-relay configuration shared by the binaries.
type NATS struct {
	// URL is NATS_URL: one server URL or a comma-separated list (nats://,
	// tls://, ws://, wss://). Empty disables NATS: everything runs on
	// database polling alone. A password in it is redacted from provenance.
	URL string
	// SubjectPrefix is MIGHTYETL_NATS_SUBJECT_PREFIX, default "mightyetl":
	// dot-separated tokens of letters, digits, '_' and '-'.
	SubjectPrefix string
	// CredsFile is MIGHTYETL_NATS_CREDS_FILE, a NATS credentials file; empty means none.
	CredsFile string
	// TLSCAFile is MIGHTYETL_NATS_TLS_CA_FILE, PEM CAs for the server; empty means system roots.
	TLSCAFile string
	// TLSCertFile and TLSKeyFile are MIGHTYETL_NATS_TLS_CERT_FILE and
	// MIGHTYETL_NATS_TLS_KEY_FILE, the client certificate for mutual TLS;
	// both or neither.
	TLSCertFile, TLSKeyFile string
	// RequestsEnabled is MIGHTYETL_NATS_REQUESTS_ENABLED, default false: run
	// the JetStream request consumer (event-driven intake).
	RequestsEnabled bool
	// OutboxPollInterval is MIGHTYETL_OUTBOX_POLL_INTERVAL, default 1s, in
	// [10ms, 1h]: the relay's fallback poll when no notification arrives.
	OutboxPollInterval time.Duration
	// RequestConcurrency is MIGHTYETL_NATS_REQUEST_CONCURRENCY, default 256, in
	// [1, 4096]: request messages in flight at once (pulled, in the intake's
	// group commit, or being acknowledged). The consumer pulls this many per
	// fetch and the concurrent submissions share commits, so it sets how many
	// requests one commit can carry.
	RequestConcurrency int
	// OutboxBatchSize is MIGHTYETL_OUTBOX_BATCH_SIZE, default 500, in [1, 10000]:
	// rows of each class (advisory, lifecycle) per relay batch.
	OutboxBatchSize int
	// RequestsMaxBytes is MIGHTYETL_NATS_REQUESTS_MAX_BYTES, default 1 GiB,
	// in [1 MiB, 1 TiB]: the request stream's size limit in bytes. New
	// requests are refused while the stream is full.
	RequestsMaxBytes int
	// RequestsMaxPerPrincipal is MIGHTYETL_NATS_REQUESTS_MAX_PER_PRINCIPAL,
	// default 100, in [1, 10000000]: requests of one principal waiting in
	// the stream; further ones of that principal are refused. Each counted
	// at the largest request, they may take at most a tenth of
	// RequestsMaxBytes (ValidateRequests).
	RequestsMaxPerPrincipal int
	// RequestMaxDeliveries is MIGHTYETL_NATS_REQUEST_MAX_DELIVERIES, default
	// 30, in [1, 1000]: deliveries of a request that keeps failing internally
	// before it is terminated with a rejection (delays 1s doubling to 1m
	// between them: about 24 minutes with the default).
	RequestMaxDeliveries int
	// StreamReplicas is MIGHTYETL_NATS_STREAM_REPLICAS, default 1, in
	// [1, 5]: replicas of the request and lifecycle streams, applied when
	// a process creates or updates them (an existing stream is updated to
	// it). More than 1 needs a JetStream cluster of at least that many
	// servers; every process must carry the same value.
	StreamReplicas int
	// ObjectIngests is MIGHTYETL_NATS_OBJECT_INGESTS, default 1
	// (natsbridge.DefaultObjectIngests), in [1, 64]: Object Store objects
	// the request consumer streams into PostgreSQL at once; an object
	// request that finds them all busy is redelivered later, so large
	// objects never take the handlers small requests need.
	ObjectIngests int
}

// Enabled reports whether a NATS server is configured.
func (n NATS) Enabled() bool { return n.URL != "" }

// RegisterNATS registers the NATS settings on l, to be applied to dst by
// l.Parse. Call dst.Validate after Parse for the checks that span settings.
func RegisterNATS(l *Loader, dst *NATS) {
	l.String(&dst.URL, "NATS_URL", "nats-url", "",
		"NATS server URL(s), comma-separated; empty disables NATS (polling only)", validateNATSURL)
	l.String(&dst.SubjectPrefix, "MIGHTYETL_NATS_SUBJECT_PREFIX", "nats-subject-prefix", events.DefaultPrefix,
		"prefix of every NATS subject and stream name", events.ValidatePrefix)
	l.String(&dst.CredsFile, "MIGHTYETL_NATS_CREDS_FILE", "nats-creds-file", "",
		"NATS credentials file (JWT and NKey seed)", nil)
	l.String(&dst.TLSCAFile, "MIGHTYETL_NATS_TLS_CA_FILE", "nats-tls-ca-file", "",
		"PEM file of CAs that verify the NATS server", nil)
	l.String(&dst.TLSCertFile, "MIGHTYETL_NATS_TLS_CERT_FILE", "nats-tls-cert-file", "",
		"client certificate (PEM) for mutual TLS with NATS", nil)
	l.String(&dst.TLSKeyFile, "MIGHTYETL_NATS_TLS_KEY_FILE", "nats-tls-key-file", "",
		"client private key (PEM) for mutual TLS with NATS", nil)
	l.Bool(&dst.RequestsEnabled, "MIGHTYETL_NATS_REQUESTS_ENABLED", "nats-requests-enabled", false,
		"consume job submissions from the JetStream request stream")
	l.Int(&dst.RequestConcurrency, "MIGHTYETL_NATS_REQUEST_CONCURRENCY", "nats-request-concurrency",
		events.DefaultRequestConcurrency, 1, 4096, "JetStream request messages handled at once (they share the intake's group commits)")
	l.Duration(&dst.OutboxPollInterval, "MIGHTYETL_OUTBOX_POLL_INTERVAL", "outbox-poll-interval",
		outbox.DefaultPollInterval, 10*time.Millisecond, time.Hour, "outbox relay fallback poll interval")
	l.Int(&dst.OutboxBatchSize, "MIGHTYETL_OUTBOX_BATCH_SIZE", "outbox-batch-size",
		outbox.DefaultBatchSize, 1, 10000, "outbox rows of each class per relay batch")
	l.Int(&dst.RequestsMaxBytes, "MIGHTYETL_NATS_REQUESTS_MAX_BYTES", "nats-requests-max-bytes",
		events.DefaultRequestsMaxBytes, 1<<20, 1<<40, "request stream size limit in bytes (new requests refused when full)")
	l.Int(&dst.RequestsMaxPerPrincipal, "MIGHTYETL_NATS_REQUESTS_MAX_PER_PRINCIPAL", "nats-requests-max-per-principal",
		events.DefaultRequestsMaxPerPrincipal, 1, 10_000_000, "requests of one principal waiting in the request stream")
	l.Int(&dst.RequestMaxDeliveries, "MIGHTYETL_NATS_REQUEST_MAX_DELIVERIES", "nats-request-max-deliveries",
		events.DefaultRequestMaxDeliveries, 1, 1000, "deliveries of a request that keeps failing before it is rejected")
	l.Int(&dst.StreamReplicas, "MIGHTYETL_NATS_STREAM_REPLICAS", "nats-stream-replicas",
		1, 1, events.MaxStreamReplicas, "replicas of the request and lifecycle streams (more than 1 needs a JetStream cluster)")
	l.Int(&dst.ObjectIngests, "MIGHTYETL_NATS_OBJECT_INGESTS", "nats-object-ingests",
		natsbridge.DefaultObjectIngests, 1, 64, "Object Store objects the request consumer streams into PostgreSQL at once")
}

// Validate checks what spans several NATS settings: the client certificate
// and key go together, and NATS-only settings need NATS_URL.
func (n NATS) Validate() error {
	if (n.TLSCertFile == "") != (n.TLSKeyFile == "") {
		return errors.New("MIGHTYETL_NATS_TLS_CERT_FILE and MIGHTYETL_NATS_TLS_KEY_FILE must be set together")
	}
	if n.RequestsEnabled && !n.Enabled() {
		return errors.New("MIGHTYETL_NATS_REQUESTS_ENABLED=true needs NATS_URL")
	}
	return nil
}

// ValidateRequests checks the request stream's limits against the largest
// request, maxRequestBytes (MIGHTYETL_MAX_PAYLOAD_BYTES), when the request
// consumer is enabled: one principal's waiting requests must fit in
// 1/events.RequestsPrincipalShares of the stream, so no principal can fill
// it and have every other principal's requests refused. The error is one
// line naming the settings and the values that would fit.
func (n NATS) ValidateRequests(maxRequestBytes int) error {
	if !n.RequestsEnabled {
		return nil
	}
	l := events.RequestsLimits{MaxBytes: int64(n.RequestsMaxBytes), MaxPerPrincipal: int64(n.RequestsMaxPerPrincipal),
		MaxMsgSize: int32(maxRequestBytes)}.WithDefaults()
	if l.Validate() == nil {
		return nil
	}
	return fmt.Errorf("MIGHTYETL_NATS_REQUESTS_MAX_PER_PRINCIPAL: %d requests of up to MIGHTYETL_MAX_PAYLOAD_BYTES (%d) could take more than 1/%d of MIGHTYETL_NATS_REQUESTS_MAX_BYTES (%d), so one principal could fill the request stream; set it to at most %d or MIGHTYETL_NATS_REQUESTS_MAX_BYTES to at least %d",
		l.MaxPerPrincipal, maxRequestBytes, events.RequestsPrincipalShares, l.MaxBytes,
		events.RequestsMaxPerPrincipalFor(l.MaxBytes, l.MaxMsgSize), l.MinStreamBytes())
}

// validateNATSURL accepts empty or a comma-separated list of URLs with a
// NATS scheme and a host. The value is never echoed: it may hold a password.
func validateNATSURL(s string) error {
	if s == "" {
		return nil
	}
	for _, part := range strings.Split(s, ",") {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil || u.Host == "" {
			return errors.New("must be a NATS URL like nats://host:4222 (or a comma-separated list)")
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return fmt.Errorf("URL scheme must be nats, tls, ws or wss")
		}
	}
	return nil
}
