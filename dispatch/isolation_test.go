package dispatch_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
)

// Tests of failure isolation in ordered dispatch: whoever releases a held
// key, whatever a send or a schedule does, only its own key or lane waits.

// rejectKey fails every send of one key with a permanent error while on is
// set, and passes the rest to the in-memory transport.
type rejectKey struct {
	relayer.Transport
	key string
	on  atomic.Bool
}

func (r *rejectKey) Send(ctx context.Context, m *relayer.Message) error {
	if r.on.Load() && m.Key == r.key {
		return fmt.Errorf("rejected by the test: %w", relayer.ErrPermanent)
	}
	return r.Transport.Send(ctx, m)
}

// TestOrderedKeyReleasedByHandKeepsItsOrder parks a key's head, lets the
// worker pass its follower and its lane's other traffic, then releases the
// key with the previous release's statement, which stamps nothing, while
// the key's later messages keep coming: the released head and its follower
// must go first, and promptly.
func TestOrderedKeyReleasedByHandKeepsItsOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	parked, _, neighbour := twoLaneKeys(t)
	tr := &rejectKey{Transport: b.mem, key: parked}
	tr.on.Store(true)
	for i := 1; i <= 2; i++ {
		b.enlistOnly(t, relayer.NewOutgoing(Shipped{i}, relayer.Key(parked)))
	}
	b.orderedWorker(t, b.db, tr, dispatch.OrderedOptions{LeaseDuration: 2 * time.Second, PollInterval: 30 * time.Millisecond})
	waitWithin(t, 5*time.Second, "the key's head parked", func() bool {
		var n int
		must(t, b.db.QueryRow(`SELECT count(*) FROM "`+b.schema+`".ob_outbox WHERE parked_at IS NOT NULL`).Scan(&n))
		return n == 1
	})
	b.shipped(t, []string{neighbour}, 3, 1)
	b.waitSent(t, 3)

	tr.on.Store(false)
	if _, err := b.db.Exec(`UPDATE "` + b.schema + `".ob_outbox SET parked_at = NULL, attempts = 0, retry_at = NULL WHERE parked_at IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
	for i := 3; i <= 5; i++ {
		b.enlistOnly(t, relayer.NewOutgoing(Shipped{i}, relayer.Key(parked)))
	}
	waitWithin(t, 5*time.Second, "every message of the released key", func() bool {
		return len(sequences(t, b.mem.All())[parked]) >= 5
	})
	checkOrder(t, b.mem.All(), []string{parked}, 5, false)
}

// TestOrderedScheduledHeadHoldsOnlyItsKey schedules a key's head for
// later: the other keys of its lane go out at once, the key's later
// messages wait for it, and it goes out at its time, not before.
func TestOrderedScheduledHeadHoldsOnlyItsKey(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	scheduled, _, neighbour := twoLaneKeys(t)
	at := time.Now().Add(2 * time.Second)
	b.enlistOnly(t, relayer.NewOutgoing(Shipped{1}, relayer.Key(scheduled), relayer.DeliverAt(at)))
	b.enlistOnly(t, relayer.NewOutgoing(Shipped{2}, relayer.Key(scheduled)), relayer.NewOutgoing(Shipped{3}, relayer.Key(scheduled)))
	b.shipped(t, []string{neighbour}, 5, 1)
	b.orderedWorker(t, b.db, b.mem, dispatch.OrderedOptions{LeaseDuration: 2 * time.Second, PollInterval: 50 * time.Millisecond})
	waitWithin(t, time.Second, "the other keys of the lane", func() bool {
		return len(sequences(t, b.mem.All())[neighbour]) == 5
	})
	if seq := sequences(t, b.mem.All()); len(seq[scheduled]) != 0 {
		t.Errorf("the scheduled key sent before its head's time: %v", seq[scheduled])
	}
	// Later messages of the lane's other keys do not wait either.
	b.enlistOnly(t, relayer.NewOutgoing(Shipped{6}, relayer.Key(neighbour)))
	waitWithin(t, time.Second, "a later message of another key", func() bool {
		return len(sequences(t, b.mem.All())[neighbour]) == 6
	})
	waitWithin(t, 5*time.Second, "the scheduled key", func() bool {
		return len(sequences(t, b.mem.All())[scheduled]) == 3
	})
	if time.Now().Before(at) {
		t.Error("the scheduled head went out early")
	}
	checkOrder(t, b.mem.All(), []string{scheduled}, 3, false)
	checkOrder(t, b.mem.All(), []string{neighbour}, 6, false)
}
