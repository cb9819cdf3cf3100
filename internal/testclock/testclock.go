// Package testclock is a clock that tests move by hand, for the parts that
// take a clock function (intake.QuotaOptions.Now and the like): a window or
// a refill is then driven by Advance, never by sleeping.
package testclock

import (
	"sync"
	"time"
)

// Manual is a clock that stands still until Advance moves it. The zero
// value starts at the zero time; New starts at a fixed instant. Safe for
// concurrent use.
type Manual struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a Manual clock at 2030-01-01T00:00:00Z.
func New() *Manual { return &Manual{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)} }

// Now returns the clock's time.
func (c *Manual) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock d forward.
func (c *Manual) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
