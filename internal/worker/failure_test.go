package worker

import (
	"errors"
	"fmt"
	"testing"

	"github.com/mightyetl/mightyetl/internal/codes"
)

func TestErrorIsMatchesByCode(t *testing.T) {
	cause := errors.New("cause")
	tests := []struct {
		name   string
		err    error
		target error
		want   bool
	}{
		{"same code", Permanent(codes.TargetFailure, cause), &Error{Code: codes.TargetFailure}, true},
		{"same code, wrapped", fmt.Errorf("finish: %w", Permanent(codes.TargetFailure, cause)), &Error{Code: codes.TargetFailure}, true},
		{"transient flag is not compared", Transient(cause), &Error{Code: codes.TargetUnavailable}, true},
		{"other code", Permanent(codes.TargetFailure, cause), &Error{Code: codes.InternalError}, false},
		{"the cause still matches", Permanent(codes.TargetFailure, cause), cause, true},
		{"not an Error", errors.New("x"), &Error{Code: codes.TargetFailure}, false},
		{"nil target Error", Permanent(codes.TargetFailure, cause), (*Error)(nil), false},
		{"sentinel cause", Permanent(codes.JobTimeout, ErrJobTimeout), ErrJobTimeout, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errors.Is(tt.err, tt.target); got != tt.want {
				t.Fatalf("errors.Is(%v, %v) = %v, want %v", tt.err, tt.target, got, tt.want)
			}
		})
	}
}
