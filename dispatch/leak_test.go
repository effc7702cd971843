package dispatch_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/internal/testkit"
)

// TestNoGoroutineOutlivesStop runs alone (not in parallel: parallel tests wait
// until the sequential ones are done), so that only the dispatcher's
// goroutines can differ before and after.
func TestNoGoroutineOutlivesStop(t *testing.T) {
	b := setup(t, dispatch.DirectOptions{})
	defer noNewGoroutines(t, runtime.NumGoroutine())
	b.start(t)
	b.publish(t, relayer.NewOutgoing(Placed{1}))
	b.waitSent(t, 1)
	b.waitRows(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.direct.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.direct.Stop(ctx); err != nil {
		t.Errorf("second Stop = %v", err)
	}
}

// noNewGoroutines fails t, listing every goroutine, when more than before are
// still running after a short grace for those that are returning.
func noNewGoroutines(t *testing.T, before int) {
	t.Helper()
	if !testkit.Within(2*time.Second, func() bool { return runtime.NumGoroutine() <= before }) {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines outlive Stop (%d before):\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
	}
}
