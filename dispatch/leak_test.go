package dispatch_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
)

// TestNoGoroutineOutlivesStop runs alone (not in parallel), so that only the
// dispatcher's goroutines can differ before and after.
func TestNoGoroutineOutlivesStop(t *testing.T) {
	b := setup(t, dispatch.DirectOptions{})
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
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
