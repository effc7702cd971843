package testkit

import (
	"fmt"
	"testing"
	"time"
)

// The first check of a condition comes at once, the next after
// firstInterval; each wait doubles, up to maxInterval, so that a condition
// met quickly is seen quickly and a slow one is not polled hard.
const (
	firstInterval = time.Millisecond
	maxInterval   = 25 * time.Millisecond
)

// Eventually waits up to timeout for cond and fails t when it did not hold
// in time, naming what it awaited: format and args, formatted only then (an
// argument whose String method reads a state shows that state at the time
// out). cond runs on the caller's goroutine, so it may call t.Fatal.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	if !Within(timeout, cond) {
		t.Fatalf("timed out after %s waiting for %s", timeout, fmt.Sprintf(format, args...))
	}
}

// Within reports whether cond held within timeout, checking it as
// Eventually does. It is for a wait whose time out is not a test's failure,
// or that runs on a goroutine other than the test's.
func Within(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	interval := firstInterval
	for !cond() {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		time.Sleep(min(interval, left))
		interval = min(2*interval, maxInterval)
	}
	return true
}
