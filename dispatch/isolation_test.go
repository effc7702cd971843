package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/store"
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
	testkit.Eventually(t, 5*time.Second, func() bool {
		var n int
		must(t, b.db.QueryRow(`SELECT count(*) FROM "`+b.schema+`".ob_outbox WHERE parked_at IS NOT NULL`).Scan(&n))
		return n == 1
	}, "the key's head parked")
	b.shipped(t, []string{neighbour}, 3, 1)
	b.waitSent(t, 3)

	tr.on.Store(false)
	if _, err := b.db.Exec(`UPDATE "` + b.schema + `".ob_outbox SET parked_at = NULL, attempts = 0, retry_at = NULL WHERE parked_at IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
	for i := 3; i <= 5; i++ {
		b.enlistOnly(t, relayer.NewOutgoing(Shipped{i}, relayer.Key(parked)))
	}
	testkit.Eventually(t, 5*time.Second, func() bool {
		return len(sequences(t, b.mem.All())[parked]) >= 5
	}, "every message of the released key")
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
	testkit.Eventually(t, time.Second, func() bool {
		return len(sequences(t, b.mem.All())[neighbour]) == 5
	}, "the other keys of the lane")
	if seq := sequences(t, b.mem.All()); len(seq[scheduled]) != 0 {
		t.Errorf("the scheduled key sent before its head's time: %v", seq[scheduled])
	}
	// Later messages of the lane's other keys do not wait either.
	b.enlistOnly(t, relayer.NewOutgoing(Shipped{6}, relayer.Key(neighbour)))
	testkit.Eventually(t, time.Second, func() bool {
		return len(sequences(t, b.mem.All())[neighbour]) == 6
	}, "a later message of another key")
	testkit.Eventually(t, 5*time.Second, func() bool {
		return len(sequences(t, b.mem.All())[scheduled]) == 3
	}, "the scheduled key")
	if time.Now().Before(at) {
		t.Error("the scheduled head went out early")
	}
	checkOrder(t, b.mem.All(), []string{scheduled}, 3, false)
	checkOrder(t, b.mem.All(), []string{neighbour}, 6, false)
}

// Stuck is a message type routed, in order, to a destination of its own.
type Stuck struct{ N int }

// hangs never returns from sends to the destination "stuck", whatever its
// context says, until released; it passes the rest to the in-memory
// transport.
type hangs struct {
	relayer.Transport
	release chan struct{}
	running atomic.Int64
}

// hungOutbox returns b's outbox with an ordered route of Stuck messages
// to the destination "stuck", whose sends hang.
func hungOutbox(t *testing.T, b *bundle) (relayer.Outbox, *hangs) {
	routes := *b.outbox.Routes
	must(t, relayer.AddType[Stuck](&routes, relayer.Route{Transport: "mem", Destination: "stuck", Ordered: true}))
	tr := &hangs{Transport: b.mem, release: make(chan struct{})}
	outbox := b.outbox
	outbox.Routes = &routes
	outbox.Transports = map[string]relayer.Transport{"mem": tr}
	return outbox, tr
}

func (h *hangs) Send(ctx context.Context, m *relayer.Message) error {
	if m.Destination == "stuck" {
		h.running.Add(1)
		<-h.release
	}
	return h.Transport.Send(context.WithoutCancel(ctx), m)
}

// TestOrderedHungSendHoldsOnlyItsLane sends one message to a destination
// whose send never returns, then a hundred on keys of other lanes, and
// four on a key of its lane: the hundred go out while the send hangs, the
// four wait for it (no other owner may send its lane meanwhile); the hung
// send is logged at Warn with its transport, destination and lane, and its
// destination is set aside where operators see it; once the send returns,
// it is recorded and sent once, and its lane goes on in order.
func TestOrderedHungSendHoldsOnlyItsLane(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	outbox, tr := hungOutbox(t, b)
	w, err := enlist.NewWriter(outbox, enlist.Options{})
	must(t, err)
	publish := func(msgs ...relayer.Outgoing) {
		must(t, w.RunInTx(context.Background(), b.db, nil, func(tx *enlist.Tx) error {
			return tx.PublishAll(context.Background(), msgs...)
		}))
	}
	stuck, _, neighbour := twoLaneKeys(t)
	publish(relayer.NewOutgoing(Stuck{1}, relayer.Key(stuck)))
	b.orderedWorkerOn(t, b.db, outbox, dispatch.OrderedOptions{LeaseDuration: 2 * time.Second, PollInterval: 50 * time.Millisecond})
	released := false
	release := func() {
		if !released {
			released = true
			close(tr.release)
		}
	}
	t.Cleanup(release) // before the worker stops
	testkit.Eventually(t, 5*time.Second, func() bool { return tr.running.Load() == 1 }, "the send to hang")

	began := time.Now()
	stuckLane, _ := relayer.Lane(stuck, relayer.LanesDefault)
	var keys []string
	for _, k := range keyList(40) {
		if l, _ := relayer.Lane(k, relayer.LanesDefault); l != stuckLane && len(keys) < 25 {
			keys = append(keys, k)
		}
	}
	b.shipped(t, []string{neighbour}, 4, 1)
	b.shipped(t, keys, 4, 5)
	testkit.Eventually(t, 10*time.Second, func() bool {
		if time.Since(began) > 9*time.Second {
			t.Log(b.logs)
		}
		return len(b.mem.Messages("orders.shipped")) == 100
	}, "the other keys' messages")
	checkOrder(t, b.mem.Messages("orders.shipped"), keys, 4, false)
	if seq := sequences(t, b.mem.Messages("orders.shipped")); len(seq[neighbour]) != 0 {
		t.Errorf("a key of the hung send's lane went out while it hung: %v", seq[neighbour])
	}

	testkit.Eventually(t, 5*time.Second, func() bool {
		logs := b.logs.String()
		return strings.Contains(logs, "ordered send still running") && strings.Contains(logs, "destination=stuck") &&
			strings.Contains(logs, "transport=mem") && strings.Contains(logs, "lane=")
	}, "a warning naming the hung send")
	testkit.Eventually(t, 5*time.Second, func() bool {
		pauses, err := b.store.Pauses(context.Background())
		must(t, err)
		for _, p := range pauses {
			if p.Destination == "stuck" {
				return true
			}
		}
		return false
	}, "the destination set aside for operators")

	release()
	testkit.Eventually(t, 10*time.Second, func() bool {
		var n int
		must(t, b.db.QueryRow(`SELECT count(*) FROM "`+b.schema+`".ob_outbox`).Scan(&n))
		return n == 0
	}, "the hung message, recorded")
	if n := len(b.mem.Messages("stuck")); n != 1 {
		t.Errorf("the hung message arrived %d times, want once", n)
	}
	checkOrder(t, b.mem.Messages("orders.shipped"), []string{neighbour}, 4, false)
}

// late delays, ignoring its context, the first send of one message body
// by a given time, then sends it.
type late struct {
	relayer.Transport
	body  string
	delay time.Duration
	once  atomic.Bool
}

func (l *late) Send(ctx context.Context, m *relayer.Message) error {
	if string(m.Body) == l.body && l.once.CompareAndSwap(false, true) {
		time.Sleep(l.delay)
		ctx = context.WithoutCancel(ctx)
	}
	return l.Transport.Send(ctx, m)
}

// TestOrderedLateSendReplaysNoOtherLane runs one batch of sixteen lanes in
// which one send returns, successfully, after the batch's deadline: the
// other lanes commit what they sent, and the late send is recorded when it
// returns, so that nothing is sent twice.
func TestOrderedLateSendReplaysNoOtherLane(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	keys := keysOnDistinctLanes(16)
	tr := &late{Transport: b.mem, body: `{"N":2}`, delay: 1500 * time.Millisecond}
	b.shipped(t, keys, 5, 80)
	o := b.orderedWorker(t, b.db, tr, dispatch.OrderedOptions{LeaseDuration: 2 * time.Second, PollInterval: 50 * time.Millisecond})
	b.waitRows(t, 0)
	morePasses(t, o, 3) // room for copies sent again
	checkOrder(t, b.mem.All(), keys, 5, false)
}

// TestLaneCountMismatchIsRefused: once a writer recorded the outbox's lane
// count, a writer and a Runner given another count refuse to publish and to
// start, naming both counts, so that no key is split across two lanes.
func TestLaneCountMismatchIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	b.enlistOnly(t, relayer.NewOutgoing(Shipped{1}, relayer.Key("k")))
	other := b.outbox
	other.Lanes = 64
	w, err := enlist.NewWriter(other, enlist.Options{})
	must(t, err)
	err = w.RunInTx(context.Background(), b.db, nil, func(tx *enlist.Tx) error {
		return tx.PublishAll(context.Background(), relayer.NewOutgoing(Shipped{2}, relayer.Key("k")))
	})
	if !errors.Is(err, store.ErrLaneCountMismatch) || !strings.Contains(err.Error(), "records 32 lanes") || !strings.Contains(err.Error(), "configured with 64") {
		t.Errorf("a writer at 64 lanes: %v, want ErrLaneCountMismatch naming 32 and 64", err)
	}
	r, err := dispatch.NewRunner(b.db, other, dispatch.RunnerOptions{})
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Start(ctx); !errors.Is(err, store.ErrLaneCountMismatch) {
		_ = r.Stop(ctx)
		t.Errorf("a Runner at 64 lanes started: %v, want ErrLaneCountMismatch", err)
	}
	if n := b.mem.Len(); n != 0 {
		t.Errorf("%d messages sent", n)
	}
}

// TestHungOrderedSendLeavesUnorderedFlowing runs a whole Runner while an
// ordered send hangs past several batch deadlines: unordered messages
// committed meanwhile keep going out at once, through direct dispatch and
// recovery. Independent testing saw unordered delivery stall once the hung
// batch's deadline had passed.
func TestHungOrderedSendLeavesUnorderedFlowing(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	outbox, tr := hungOutbox(t, b)
	const lease = 2 * time.Second // a batch may take 1 s
	r, err := dispatch.NewRunner(b.db, outbox, dispatch.RunnerOptions{
		DisableCleanup: true, Logger: b.logger(),
		Ordered:  dispatch.OrderedOptions{LeaseDuration: lease, PollInterval: 50 * time.Millisecond},
		Recovery: dispatch.RecoveryOptions{LeaseDuration: lease, PollInterval: 50 * time.Millisecond, MinAge: 300 * time.Millisecond},
	})
	must(t, err)
	w, err := enlist.NewWriter(outbox, enlist.Options{Listener: r})
	must(t, err)
	must(t, r.Start(context.Background()))
	var once sync.Once
	release := func() { once.Do(func() { close(tr.release) }) }
	t.Cleanup(func() {
		release()
		r.Stop(context.Background())
	})
	publish := func(msgs ...relayer.Outgoing) {
		must(t, w.RunInTx(context.Background(), b.db, nil, func(tx *enlist.Tx) error {
			return tx.PublishAll(context.Background(), msgs...)
		}))
	}
	stuck, _, _ := twoLaneKeys(t)
	publish(relayer.NewOutgoing(Stuck{1}, relayer.Key(stuck)))
	testkit.Eventually(t, 5*time.Second, func() bool { return tr.running.Load() == 1 }, "the send to hang")

	// Four batch deadlines' worth of commits, one every 20 ms, each
	// delivered within a second of its commit.
	var worst time.Duration
	for i := range 200 {
		at := time.Now()
		publish(relayer.NewOutgoing(Placed{i}))
		testkit.Eventually(t, time.Second, func() bool { return len(b.mem.Messages("orders.placed")) >= i+1 },
			"message %d of 200, committed after the send hung, to be delivered", i+1)
		worst = max(worst, time.Since(at))
		time.Sleep(20 * time.Millisecond) // the pace of the commits
	}
	t.Logf("200 unordered messages over %s of a hung ordered send, each delivered within %s of its commit", 200*20*time.Millisecond, worst.Round(time.Millisecond))
}
