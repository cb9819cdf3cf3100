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
	s, err := NewSubjects(prefix)
	if err != nil {
		return nil, err
	}
	return EnsureStream(ctx, js, LifecycleStreamConfig(s))
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
