package worker

import (
	"errors"
	"fmt"
	"testing"
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
