package events

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Lifecycle stream retention. Stated here and in docs/operations/nats.md.
const (
	// LifecycleMaxAge is how long a lifecycle event stays in the stream.
	LifecycleMaxAge = 7 * 24 * time.Hour
	// LifecycleDuplicateWindow is how long JetStream remembers a Nats-Msg-Id:
	// a relay that republishes an outbox row within this window (it crashed
	// between publish and delete) adds nothing to the stream.
	LifecycleDuplicateWindow = 2 * time.Minute
)

// MaxStreamReplicas is the most replicas a JetStream stream may have
// (MIGHTYETL_NATS_STREAM_REPLICAS is validated against it).
const MaxStreamReplicas = 5

// WithReplicas returns cfg with n replicas; n below 1 means 1 (the
// default: one copy, as on a single server). A replica count above 1
// needs a JetStream cluster of at least that many servers; the server
// refuses it otherwise.
func WithReplicas(cfg jetstream.StreamConfig, n int) jetstream.StreamConfig {
	cfg.Replicas = max(n, 1)
	return cfg
}

// ErrStreamConflict reports that a stream of the expected name exists but
// captures other subjects (another prefix mapped to the same name, or a
// stream someone else made). EnsureStream never takes such a stream over.
var ErrStreamConflict = errors.New("a stream of that name exists with other subjects")

// LifecycleStreamConfig is the lifecycle stream for the subjects s: name
// "<P>_LIFECYCLE", subjects "<p>.lifecycle.>", limits retention (age
// LifecycleMaxAge, discard old), file storage, one replica, duplicate window
// LifecycleDuplicateWindow. Callers may adjust it (replicas in a cluster)
// before passing it to EnsureStream.
func LifecycleStreamConfig(s Subjects) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        s.LifecycleStream(),
		Description: "mightyETL job lifecycle events (CloudEvents JSON, Nats-Msg-Id = outbox id)",
		Subjects:    []string{s.LifecycleAll()},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      LifecycleMaxAge,
		Duplicates:  LifecycleDuplicateWindow,
		Storage:     jetstream.FileStorage,
		Replicas:    1,
	}
}

// EnsureLifecycleStream creates or updates the lifecycle stream of prefix
// with LifecycleStreamConfig. It is idempotent and safe to call from any
// number of processes at once. Errors: ErrInvalidPrefix, ErrStreamConflict,
// or the JetStream error (NATS unavailable, JetStream disabled, no
// permission).
func EnsureLifecycleStream(ctx context.Context, js jetstream.JetStream, prefix string) (jetstream.Stream, error) {
	return EnsureLifecycleStreamReplicas(ctx, js, prefix, 1)
}

// EnsureLifecycleStreamReplicas is EnsureLifecycleStream with replicas
// copies of the stream (WithReplicas). An existing stream with another
// replica count is updated to replicas: JetStream in a cluster scales it
// up or down in place, keeping its messages.
func EnsureLifecycleStreamReplicas(ctx context.Context, js jetstream.JetStream, prefix string, replicas int) (jetstream.Stream, error) {
	s, err := NewSubjects(prefix)
	if err != nil {
		return nil, err
	}
	return EnsureStream(ctx, js, WithReplicas(LifecycleStreamConfig(s), replicas))
}

// EnsureStream creates the stream cfg or updates it to cfg. A stream of that
// name whose subjects differ from cfg.Subjects is left alone and
// ErrStreamConflict returned. Concurrent callers with the same cfg all
// succeed.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	existing, err := js.Stream(ctx, cfg.Name)
	switch {
	case err == nil:
		have := slices.Clone(existing.CachedInfo().Config.Subjects)
		want := slices.Clone(cfg.Subjects)
		slices.Sort(have)
		slices.Sort(want)
		if !slices.Equal(have, want) {
			return nil, fmt.Errorf("ensure stream %s: %w", cfg.Name, ErrStreamConflict)
		}
	case errors.Is(err, jetstream.ErrStreamNotFound):
	default:
		return nil, fmt.Errorf("ensure stream %s: look up: %w", cfg.Name, err)
	}
	st, err := js.CreateOrUpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
	}
	return st, nil
}
