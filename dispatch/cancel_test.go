package dispatch_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/internal/testkit"
)

// Cancelling the context of Runner.Run, the documented way to stop it, is
// as clean as Stop: the batch in flight admits nothing more, and what it
// had sent is recorded, so that nothing is sent twice when the workers run
// again. Before, the batch in flight rolled back on the cancelled context
// and everything it had sent (for recovery, up to a whole take) went out
// again.
func TestCancellingRunSendsNothingTwice(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"recovery", "ordered"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, dispatch.DirectOptions{})
			opts := dispatch.RunnerOptions{
				DisableDirect: true, DisableCleanup: true,
				Recovery: dispatch.RecoveryOptions{MinAge: time.Nanosecond, PollInterval: 50 * time.Millisecond},
				Ordered:  dispatch.OrderedOptions{PollInterval: 50 * time.Millisecond},
				Logger:   b.logger(),
			}
			total := 3000
			if kind == "recovery" {
				opts.DisableOrdered = true
				// Chunks of 50 sent 10ms apart: a take of thousands of rows
				// is in flight when the context is cancelled.
				b.mem.SetCapabilities("orders.placed", relayer.Capabilities{MaxBatchSize: 50})
				b.mem.SetDelay(10 * time.Millisecond)
				enlistPlaced(t, b, total)
			} else {
				opts.DisableRecovery = true
				b.mem.SetDelay(time.Millisecond)
				b.shipped(t, keyList(60), total/60, 500)
			}
			cancel := runRunner(t, b, opts)
			testkit.Eventually(t, 10*time.Second, func() bool { return b.mem.Len() >= 300 }, "300 messages sent")
			cancel()
			before := b.mem.Len()
			if before >= total {
				t.Fatalf("all %d sent before the cancellation took effect; the test needs a batch in flight", before)
			}
			drainChecked(t, b, opts, total, before)
		})
	}
}

// A send that ignores its context and is still running when the grace
// after a cancellation runs out is abandoned in time for its take to
// commit: the take's other sends are recorded, and only the hung send's
// rows are sent again. Before, the take's commit came too late and every
// row it had sent went out again.
func TestCancellingRunWithAHungSendResendsOnlyItsRows(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	opts := dispatch.RunnerOptions{
		DisableDirect: true, DisableCleanup: true, DisableOrdered: true,
		Recovery: dispatch.RecoveryOptions{MinAge: time.Nanosecond, PollInterval: 50 * time.Millisecond, Workers: 1},
		Logger:   b.logger(),
	}
	const total, chunk = 1000, 50
	b.mem.SetCapabilities("orders.placed", relayer.Capabilities{MaxBatchSize: chunk})
	enlistPlaced(t, b, total)
	b.mem.SetDelay(20 * time.Millisecond)
	cancel := runRunner(t, b, opts)
	testkit.Eventually(t, 10*time.Second, func() bool { return b.mem.Len() >= 4*chunk }, "4 chunks sent")
	release := b.mem.Block(true)
	defer release()
	testkit.Eventually(t, 10*time.Second, func() bool { return b.mem.Waiting() > 0 }, "a send hung")
	sent := b.mem.Len()
	cancel()
	release() // it returns its context's error: the broker did not take it
	if sent >= total {
		t.Fatalf("all %d sent before the send hung; the test needs a take in flight", sent)
	}
	drainChecked(t, b, opts, total, sent)
}

// enlistPlaced commits total unordered messages for recovery alone, 500
// per transaction.
func enlistPlaced(t *testing.T, b *bundle, total int) {
	for range total / 500 {
		msgs := make([]relayer.Outgoing, 500)
		for i := range msgs {
			msgs[i] = relayer.NewOutgoing(Placed{i})
		}
		b.enlistOnly(t, msgs...)
	}
}

// runRunner runs a Runner with opts until the returned function cancels
// its context and waits for Run to return.
func runRunner(t *testing.T, b *bundle, opts dispatch.RunnerOptions) (cancel func()) {
	r, err := dispatch.NewRunner(b.db, b.outbox, opts)
	must(t, err)
	ctx, stop := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if err := r.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Error(err)
		}
	}()
	return func() {
		stop()
		<-stopped
	}
}

// drainChecked runs a Runner with opts until the outbox is empty, then
// checks that each of total messages was delivered once; before is how many
// went out before, for the log.
func drainChecked(t *testing.T, b *bundle, opts dispatch.RunnerOptions, total, before int) {
	b.mem.SetDelay(0)
	cancel := runRunner(t, b, opts)
	b.waitRows(t, 0)
	cancel()
	seen := map[uuid.UUID]int{}
	dups := 0
	for _, m := range b.mem.All() {
		if seen[m.ID]++; seen[m.ID] > 1 {
			dups++
		}
	}
	t.Logf("%d sent before the cancellation, %d in all, %d sent twice", before, b.mem.Len(), dups)
	if len(seen) != total || dups != 0 {
		t.Errorf("%d distinct of %d delivered, %d sent twice; want all, none twice", len(seen), total, dups)
	}
}
