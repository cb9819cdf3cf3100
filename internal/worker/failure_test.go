package worker

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestErrorIsMatchesByCode(t *testing.T) {
	cause := errors.New("cause")
	tests := []struct {
		name   string
		err    error
		target error
		want   bool
	}{
		{"same code", Permanent(CodeTargetFailure, cause), &Error{Code: CodeTargetFailure}, true},
		{"same code, wrapped", fmt.Errorf("finish: %w", Permanent(CodeTargetFailure, cause)), &Error{Code: CodeTargetFailure}, true},
		{"transient flag is not compared", Transient(cause), &Error{Code: CodeTargetUnavailable}, true},
		{"other code", Permanent(CodeTargetFailure, cause), &Error{Code: CodeInternalError}, false},
		{"the cause still matches", Permanent(CodeTargetFailure, cause), cause, true},
		{"not an Error", errors.New("x"), &Error{Code: CodeTargetFailure}, false},
		{"nil target Error", Permanent(CodeTargetFailure, cause), (*Error)(nil), false},
		{"sentinel cause", Permanent(CodeJobTimeout, ErrJobTimeout), ErrJobTimeout, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errors.Is(tt.err, tt.target); got != tt.want {
				t.Fatalf("errors.Is(%v, %v) = %v, want %v", tt.err, tt.target, got, tt.want)
			}
		})
	}
}

func TestBackoffCap(t *testing.T) {
	tests := []struct {
		base, max time.Duration
		attempt   int
		want      time.Duration
	}{
		{time.Second, 5 * time.Minute, 0, time.Second},
		{time.Second, 5 * time.Minute, 1, time.Second},
		{time.Second, 5 * time.Minute, 2, 2 * time.Second},
		{time.Second, 5 * time.Minute, 3, 4 * time.Second},
		{time.Second, 5 * time.Minute, 9, 256 * time.Second},
		{time.Second, 5 * time.Minute, 10, 5 * time.Minute},
		{time.Second, 5 * time.Minute, 1000, 5 * time.Minute}, // no overflow
		{time.Millisecond, time.Millisecond, 5, time.Millisecond},
		{time.Second, 500 * time.Millisecond, 1, 500 * time.Millisecond}, // the cap wins over the base
		{0, time.Minute, 7, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v-%v-%d", tt.base, tt.max, tt.attempt), func(t *testing.T) {
			if got := backoffCap(tt.base, tt.max, tt.attempt); got != tt.want {
				t.Fatalf("backoffCap = %v, want %v", got, tt.want)
			}
			// Full jitter: every draw lies in [0, cap].
			for range 200 {
				if d := backoff(tt.base, tt.max, tt.attempt); d < 0 || d > tt.want {
					t.Fatalf("backoff = %v, outside [0, %v]", d, tt.want)
				}
			}
		})
	}
}
