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
	id  uuid.UUID
	key string
	at  time.Time
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
}

func newBroker() *broker {
	return &broker{inflight: map[int]int{}, slowFor: 700 * time.Millisecond}
}

func (b *broker) Capabilities(context.Context, string) (relayer.Capabilities, error) {
	return relayer.Capabilities{MaxBatchSize: 100, OrderedByKey: true}, nil
}

func (b *broker) Send(ctx context.Context, m *relayer.Message) error {
	return b.SendBatch(ctx, []*relayer.Message{m})
}

var errTransient = errors.New("broker: transient failure")

func (b *broker) SendBatch(ctx context.Context, ms []*relayer.Message) error {
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
	b.mu.Unlock()
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
		b.deliveries = append(b.deliveries, delivery{id: m.ID, key: m.Key, at: now})
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

// count returns how many deliveries there were.
func (b *broker) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.deliveries)
}
