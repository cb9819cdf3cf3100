package console_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: the
// intake, worker, pools and chromium are all stopped at cleanup, and the
// tests' HTTP client closes its keep-alive connections, so nothing is
// ignored.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
