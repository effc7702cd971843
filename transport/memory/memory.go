// Package memory is an in-process [relayer.Transport] for tests and demos. It
// records what it receives per destination, reports configurable
// capabilities, and can be told to fail, to be slow, or to block.
package memory

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/relayer-go/relayer"
)

// DefaultMaxBatchSize is the batch size reported for destinations without
// configured capabilities.
const DefaultMaxBatchSize = 1000

// Transport is an in-memory broker. The zero value is not usable; call [New].
// It is safe for concurrent use.
type Transport struct {
	mu        sync.Mutex
	changed   chan struct{} // closed and replaced on every accepted message
	received  map[string][]*relayer.Message
	order     []*relayer.Message
	caps      map[string]relayer.Capabilities
	capsErr   map[string]error
	defCaps   relayer.Capabilities
	fail      func(*relayer.Message) error
	delay     time.Duration
	gate      chan struct{} // when non-nil, sends wait for it to close
	deafGate  bool          // the gate ignores cancellation
	sends     int
	capLookup int
	waiting   int // sends waiting at the gate
}

// New returns an empty transport whose destinations report key ordering and
// a MaxBatchSize of DefaultMaxBatchSize.
func New() *Transport {
	return &Transport{
		changed:  make(chan struct{}),
		received: make(map[string][]*relayer.Message),
		caps:     make(map[string]relayer.Capabilities),
		capsErr:  make(map[string]error),
		defCaps:  relayer.Capabilities{OrderedByKey: true, MaxBatchSize: DefaultMaxBatchSize},
	}
}

// SetCapabilities sets what one destination reports.
func (t *Transport) SetCapabilities(destination string, c relayer.Capabilities) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.caps[destination] = c
	delete(t.capsErr, destination)
}

// SetCapabilitiesError makes capability lookups of one destination fail with
// err; nil clears it.
func (t *Transport) SetCapabilitiesError(destination string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err == nil {
		delete(t.capsErr, destination)
	} else {
		t.capsErr[destination] = err
	}
}

// FailWith makes each message for which f returns an error fail with it; nil
// f accepts everything again. In a batch, the failing messages are reported
// through a *relayer.BatchError and the others are accepted.
func (t *Transport) FailWith(f func(*relayer.Message) error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.fail = f
}

// SetDelay makes every send take at least d (cancellation cuts it short).
func (t *Transport) SetDelay(d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.delay = d
}

// Block makes sends wait until the returned release function is called. When
// ignoreCancellation is true, waiting sends do not observe their context,
// like a misbehaving client library.
func (t *Transport) Block(ignoreCancellation bool) (release func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	gate := make(chan struct{})
	t.gate, t.deafGate = gate, ignoreCancellation
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			if t.gate == gate {
				t.gate = nil
			}
			t.mu.Unlock()
			close(gate)
		})
	}
}

// Capabilities implements relayer.Transport.
func (t *Transport) Capabilities(ctx context.Context, destination string) (relayer.Capabilities, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.capLookup++
	if err := t.capsErr[destination]; err != nil {
		return relayer.Capabilities{}, err
	}
	if c, ok := t.caps[destination]; ok {
		return c, nil
	}
	return t.defCaps, nil
}

// Send implements relayer.Transport.
func (t *Transport) Send(ctx context.Context, msg *relayer.Message) error {
	if err := t.wait(ctx); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sends++
	if t.fail != nil {
		if err := t.fail(msg); err != nil {
			return err
		}
	}
	t.accept(msg)
	return nil
}

// SendBatch implements relayer.Transport. All messages must share one
// destination.
func (t *Transport) SendBatch(ctx context.Context, msgs []*relayer.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := t.wait(ctx); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sends++
	for _, m := range msgs[1:] {
		if m.Destination != msgs[0].Destination {
			return fmt.Errorf("memory: batch mixes destinations %q and %q", msgs[0].Destination, m.Destination)
		}
	}
	var errs []error
	for i, m := range msgs {
		if t.fail != nil {
			if err := t.fail(m); err != nil {
				if errs == nil {
					errs = make([]error, len(msgs))
				}
				errs[i] = err
				continue
			}
		}
		t.accept(m)
	}
	if errs != nil {
		return &relayer.BatchError{Errs: errs}
	}
	return nil
}

func (t *Transport) wait(ctx context.Context) error {
	t.mu.Lock()
	delay, gate, deaf := t.delay, t.gate, t.deafGate
	t.mu.Unlock()
	if gate != nil {
		t.mu.Lock()
		t.waiting++
		t.mu.Unlock()
		defer func() {
			t.mu.Lock()
			t.waiting--
			t.mu.Unlock()
		}()
		if deaf {
			<-gate
		} else {
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	if delay > 0 {
		timer := time.NewTimer(delay)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return ctx.Err()
}

// accept records a copy of m; t.mu is held. Pointers keep appends cheap when
// a test or benchmark sends hundreds of thousands of messages.
func (t *Transport) accept(m *relayer.Message) {
	c := *m
	t.received[m.Destination] = append(t.received[m.Destination], &c)
	t.order = append(t.order, &c)
	close(t.changed)
	t.changed = make(chan struct{})
}

func values(ms []*relayer.Message) []relayer.Message {
	out := make([]relayer.Message, len(ms))
	for i, m := range ms {
		out[i] = *m
	}
	return out
}

// Messages returns what one destination received, in acceptance order.
func (t *Transport) Messages(destination string) []relayer.Message {
	t.mu.Lock()
	defer t.mu.Unlock()
	return values(t.received[destination])
}

// All returns every accepted message, in acceptance order.
func (t *Transport) All() []relayer.Message {
	t.mu.Lock()
	defer t.mu.Unlock()
	return values(t.order)
}

// Len returns the number of accepted messages.
func (t *Transport) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.order)
}

// Sends returns how many Send and SendBatch calls were made.
func (t *Transport) Sends() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sends
}

// CapabilityLookups returns how many times Capabilities was called.
func (t *Transport) CapabilityLookups() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.capLookup
}

// Waiting returns how many sends are waiting at the gate of [Transport.Block]
// right now: a test knows from it that a sender is inside the transport.
func (t *Transport) Waiting() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.waiting
}

// WaitFor blocks until at least n messages were accepted or ctx ends.
func (t *Transport) WaitFor(ctx context.Context, n int) error {
	for {
		t.mu.Lock()
		got, changed := len(t.order), t.changed
		t.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("memory: %d of %d messages arrived: %w", got, n, ctx.Err())
		}
	}
}

// Reset forgets every accepted message and the call counters; configuration
// stays.
func (t *Transport) Reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.received = make(map[string][]*relayer.Message)
	t.order = nil
	t.sends, t.capLookup = 0, 0
}
