package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
)

// delivery is one message the broker accepted.
type delivery struct {
	id      uuid.UUID
	key     string
	ordered bool
	lane    int // for ordered messages
	at      time.Time
	by      *worker // who sent it, when known
}

// broker is the instrumented transport: it records every message it
// accepts, counts moments when two sends of one lane were in flight at once,
// and injects the broker's faults on demand.
type broker struct {
	mu         sync.Mutex
	deliveries []delivery
	inflight   map[int]int // lane → sends in flight
	overlaps   int

	// down makes every send fail with relayer.ErrUnavailable.
	down atomic.Bool
	// flaky fails 5% of sends with a transient error and delays 1% by
	// slowFor.
	flaky   atomic.Bool
	slowFor time.Duration

	sends, failed, slowed atomic.Int64

	// remoteSends are the ordered sends of worker processes (see arrive).
	remoteSends []remoteSend

	// refuse, when set, fails the sends of the messages it returns true
	// for, with a transient error: poison messages.
	refuse atomic.Pointer[func(*relayer.Message) bool]
	// delay is how long each send of unordered messages takes.
	delay atomic.Int64

	// freeze, when armed, stops the next send of an ordered message until
	// thaw closes, whatever its context says: a worker frozen in a send.
	// Meanwhile the starts of other sends of its lane are noted.
	freeze       atomic.Bool
	frozen       bool
	frozenLane   int
	frozenAt     time.Time
	thaw         chan struct{}
	laneStarts   []time.Time // other sends of the frozen lane, while frozen
	frozenFinal  bool        // the frozen send has returned
	frozenWorker *worker     // whose send froze
}

func newBroker() *broker {
	return &broker{inflight: map[int]int{}, slowFor: 700 * time.Millisecond, thaw: make(chan struct{})}
}

// thawAll ends the freeze: the frozen send goes on, and so do its worker's
// sessions.
func (b *broker) thawAll() {
	b.mu.Lock()
	w := b.frozenWorker
	b.mu.Unlock()
	if w != nil && w.proxy != nil {
		w.proxy.thaw()
	}
	close(b.thaw)
}

// frozenSend reports whether a send is frozen, and when it froze.
func (b *broker) frozenSend() (bool, time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.frozen, b.frozenAt
}

// otherSendsOfFrozenLane returns when other sends of the frozen send's lane
// started while it was frozen.
func (b *broker) otherSendsOfFrozenLane() []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.laneStarts)
}

func (b *broker) Capabilities(context.Context, string) (relayer.Capabilities, error) {
	return relayer.Capabilities{MaxBatchSize: 100, OrderedByKey: true}, nil
}

func (b *broker) Send(ctx context.Context, m *relayer.Message) error {
	return b.SendBatch(ctx, []*relayer.Message{m})
}

var errTransient = errors.New("broker: transient failure")

func (b *broker) SendBatch(ctx context.Context, ms []*relayer.Message) error {
	return b.sendAs(ctx, ms, nil)
}

// workerSends is the broker as one worker's transport, so that the broker
// knows who sends.
type workerSends struct {
	b *broker
	w *worker
}

func (t workerSends) Capabilities(ctx context.Context, d string) (relayer.Capabilities, error) {
	return t.b.Capabilities(ctx, d)
}

func (t workerSends) Send(ctx context.Context, m *relayer.Message) error {
	return t.b.sendAs(ctx, []*relayer.Message{m}, t.w)
}

func (t workerSends) SendBatch(ctx context.Context, ms []*relayer.Message) error {
	return t.b.sendAs(ctx, ms, t.w)
}

// sendAs sends for worker w (nil: unknown).
func (b *broker) sendAs(ctx context.Context, ms []*relayer.Message, w *worker) error {
	b.sends.Add(1)
	var lanes []int
	for _, m := range ms {
		if m.Ordered && !slices.Contains(lanes, m.Lane) {
			lanes = append(lanes, m.Lane)
		}
	}
	b.mu.Lock()
	for _, l := range lanes {
		b.inflight[l]++
		if b.inflight[l] > 1 {
			b.overlaps++
		}
	}
	freezeThis := len(lanes) > 0 && !b.frozen && b.freeze.CompareAndSwap(true, false)
	if freezeThis {
		b.frozen, b.frozenLane, b.frozenAt, b.frozenWorker = true, lanes[0], time.Now(), w
		if w != nil && w.proxy != nil {
			w.proxy.freeze() // the whole worker stops, its database sessions too
		}
	} else if b.frozen && !b.frozenFinal && slices.Contains(lanes, b.frozenLane) {
		b.laneStarts = append(b.laneStarts, time.Now())
	}
	thaw := b.thaw
	b.mu.Unlock()
	if freezeThis {
		<-thaw // frozen: no context, no deadline
		defer func() {
			b.mu.Lock()
			b.frozenFinal = true
			b.mu.Unlock()
		}()
	}
	defer func() {
		b.mu.Lock()
		for _, l := range lanes {
			b.inflight[l]--
		}
		b.mu.Unlock()
	}()
	if b.down.Load() {
		b.failed.Add(1)
		return fmt.Errorf("broker down: %w", relayer.ErrUnavailable)
	}
	if d := time.Duration(b.delay.Load()); d > 0 && !ms[0].Ordered {
		time.Sleep(d)
	}
	if refuse := b.refuse.Load(); refuse != nil {
		for _, m := range ms {
			if (*refuse)(m) {
				b.failed.Add(1)
				return errTransient
			}
		}
	}
	if b.flaky.Load() {
		switch x := rand.Float64(); {
		case x < 0.05:
			b.failed.Add(1)
			return errTransient
		case x < 0.06:
			b.slowed.Add(1)
			select {
			case <-time.After(b.slowFor):
			case <-ctx.Done():
				b.failed.Add(1)
				return ctx.Err()
			}
		}
	}
	now := time.Now()
	b.mu.Lock()
	for _, m := range ms {
		b.deliveries = append(b.deliveries, delivery{id: m.ID, key: m.Key, ordered: m.Ordered, lane: m.Lane, at: now, by: w})
	}
	b.mu.Unlock()
	return nil
}

// snapshot returns the deliveries so far and the lane overlaps seen.
func (b *broker) snapshot() ([]delivery, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.deliveries), b.overlaps
}

// laneDeliveredAfter reports whether a worker other than not delivered a
// message of one of lanes after t.
func (b *broker) laneDeliveredAfter(lanes []int, t time.Time, not *worker) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := len(b.deliveries) - 1; i >= 0 && b.deliveries[i].at.After(t); i-- {
		if d := b.deliveries[i]; d.key != "" && d.by != not && slices.Contains(lanes, d.lane) {
			return true
		}
	}
	return false
}

// count returns how many deliveries there were.
func (b *broker) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.deliveries)
}
