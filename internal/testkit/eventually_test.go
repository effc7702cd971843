package testkit_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relayer-go/relayer/internal/testkit"
)

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	start := time.Now()
	testkit.Eventually(t, 5*time.Second, func() bool { return n.Add(1) == 5 }, "the fifth check")
	if got := n.Load(); got != 5 {
		t.Fatalf("checked %d times, want 5", got)
	}
	// 1+2+4+8 ms of waits between the five checks.
	if took := time.Since(start); took > time.Second {
		t.Fatalf("took %s", took)
	}
}

// recorder is a testing.TB that records a failure instead of ending the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

type lazy struct{ n *atomic.Int64 }

func (l lazy) String() string { return fmt.Sprint(l.n.Load()) }

func TestEventuallyNamesWhatItAwaitedWhenTimedOut(t *testing.T) {
	t.Parallel()
	r := &recorder{TB: t}
	var checks atomic.Int64
	testkit.Eventually(r, 50*time.Millisecond, func() bool { checks.Add(1); return false }, "row %d after %v checks", 7, lazy{&checks})
	want := fmt.Sprintf("timed out after 50ms waiting for row 7 after %d checks", checks.Load())
	if r.failed != want {
		t.Fatalf("failed with %q, want %q", r.failed, want)
	}
	if !strings.Contains(r.failed, "row 7") || checks.Load() < 3 {
		t.Fatalf("checked %d times", checks.Load())
	}
}

func TestWithinReportsATimeOut(t *testing.T) {
	t.Parallel()
	start := time.Now()
	if testkit.Within(30*time.Millisecond, func() bool { return false }) {
		t.Fatal("a condition that never holds held")
	}
	if took := time.Since(start); took < 30*time.Millisecond || took > time.Second {
		t.Fatalf("gave up after %s, want 30ms", took)
	}
}
