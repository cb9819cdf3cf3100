package events

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// DefaultPrefix is the subject prefix when none is configured.
const DefaultPrefix = "mightyetl"

// prefixPattern is a NATS token path: tokens of [A-Za-z0-9_-] separated by
// dots, no wildcards, no empty tokens.
var prefixPattern = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)

// tokenPattern is one subject token as used for principals and states.
var tokenPattern = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// ErrInvalidPrefix reports a subject prefix that is not a NATS token path.
var ErrInvalidPrefix = errors.New("subject prefix must be dot-separated tokens of letters, digits, '_' or '-' (like mightyetl or tenant-a.etl)")

// ValidatePrefix reports whether p is usable as a subject prefix: one or more
// tokens of [A-Za-z0-9_-] separated by single dots, at most 128 characters.
// It returns ErrInvalidPrefix otherwise.
func ValidatePrefix(p string) error {
	if len(p) > 128 || !prefixPattern.MatchString(p) {
		return ErrInvalidPrefix
	}
	return nil
}

// Subjects names every subject under one prefix. The zero value is not
// usable; use NewSubjects. Values are immutable and safe to share.
type Subjects struct {
	prefix string
}

// NewSubjects returns the subjects under prefix, or ErrInvalidPrefix.
func NewSubjects(prefix string) (Subjects, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return Subjects{}, err
	}
	return Subjects{prefix: prefix}, nil
}

// Prefix is the validated prefix.
func (s Subjects) Prefix() string { return s.prefix }

// JobsAvailable is the core NATS wake-up subject, "<p>.jobs.available".
func (s Subjects) JobsAvailable() string { return s.prefix + ".jobs.available" }

// JobsRevoked is the core NATS revocation subject, "<p>.jobs.revoked".
func (s Subjects) JobsRevoked() string { return s.prefix + ".jobs.revoked" }

// Lifecycle is the JetStream subject of a lifecycle event for a job status,
// "<p>.lifecycle.<status lowercase>". It returns an error when status is
// not a single subject token.
func (s Subjects) Lifecycle(status string) (string, error) {
	if !tokenPattern.MatchString(status) {
		return "", fmt.Errorf("lifecycle subject: status is not a subject token")
	}
	return s.prefix + ".lifecycle." + strings.ToLower(status), nil
}

// LifecycleAll is the lifecycle stream's filter, "<p>.lifecycle.>".
func (s Subjects) LifecycleAll() string { return s.prefix + ".lifecycle.>" }

// Requests is the JetStream subject a producer publishes its submissions
// to, "<p>.requests.<principal>". It returns an error when principal is not a
// single subject token.
func (s Subjects) Requests(principal string) (string, error) {
	if !tokenPattern.MatchString(principal) {
		return "", fmt.Errorf("request subject: principal is not a subject token")
	}
	return s.prefix + ".requests." + principal, nil
}

// RequestsAll is the request stream's filter, "<p>.requests.>".
func (s Subjects) RequestsAll() string { return s.prefix + ".requests.>" }

// Rejections is the core NATS subject of payload-free rejections,
// "<p>.rejections".
func (s Subjects) Rejections() string { return s.prefix + ".rejections" }

// principalOf returns the principal token of a request subject, or false
// when subject is not exactly "<p>.requests.<one token>".
func (s Subjects) principalOf(subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, s.prefix+".requests.")
	if !ok || !tokenPattern.MatchString(rest) {
		return "", false
	}
	return rest, true
}

// streamName derives a JetStream stream name from the prefix: upper-cased,
// dots replaced by underscores, then "_" + suffix. Distinct prefixes can map
// to one name ("a.b" and "a_b"); EnsureStream refuses to take over a stream
// whose subjects differ, so such a collision fails loudly instead of mixing
// tenants.
func (s Subjects) streamName(suffix string) string {
	return strings.ToUpper(strings.ReplaceAll(s.prefix, ".", "_")) + "_" + suffix
}

// LifecycleStream is the lifecycle stream's name, "<P>_LIFECYCLE".
func (s Subjects) LifecycleStream() string { return s.streamName("LIFECYCLE") }

// RequestsStream is the request stream's name, "<P>_REQUESTS".
func (s Subjects) RequestsStream() string { return s.streamName("REQUESTS") }
