package dispatch_test

import (
	"context"
	"testing"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/internal/testkit"
)

// The workers of one Runner share one outbox core: a destination's
// capabilities, looked up by direct dispatch, serve recovery too (and the
// ordered workers). Before, recovery's drainers each kept a cache of their
// own and asked the transport again.
func TestRunnerWorkersShareOneCapabilityCache(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	r, err := dispatch.NewRunner(b.db, b.outbox, dispatch.RunnerOptions{
		DisableCleanup: true, DisableOrdered: true, Logger: b.logger(),
		Recovery: dispatch.RecoveryOptions{PollInterval: 20 * time.Millisecond, MinAge: 300 * time.Millisecond},
	})
	must(t, err)
	w, err := enlist.NewWriter(b.outbox, enlist.Options{Listener: r})
	must(t, err)
	must(t, r.Start(context.Background()))
	t.Cleanup(func() { r.Stop(context.Background()) })

	must(t, w.RunInTx(context.Background(), b.db, nil, func(tx *enlist.Tx) error {
		return tx.PublishAll(context.Background(), relayer.NewOutgoing(Placed{1}))
	}))
	testkit.Eventually(t, 10*time.Second, func() bool { return b.mem.Len() == 1 }, "direct dispatch to send the first message")
	lookups := b.mem.CapabilityLookups()
	if lookups == 0 {
		t.Fatal("direct dispatch sent without looking the destination up")
	}
	b.enlistOnly(t, relayer.NewOutgoing(Placed{2})) // direct dispatch never hears of it
	testkit.Eventually(t, 10*time.Second, func() bool { return b.mem.Len() == 2 }, "recovery to send the second")
	if got := b.mem.CapabilityLookups(); got != lookups {
		t.Errorf("the transport was asked for capabilities %d times after direct dispatch had asked %d times: recovery did not share the cache", got, lookups)
	}
}
