package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
)

// Message types the runs publish.
const (
	eventType   = "bench.event"
	orderedType = "bench.ordered"
)

// event and orderedEvent are message bodies: the first 8 bytes a sequence
// number (per key, for ordered messages), the rest padding. Each names its
// own type, since a type's name must not depend on the value.
type (
	event        struct{ body []byte }
	orderedEvent struct{ body []byte }
)

func (event) MessageType() string        { return eventType }
func (orderedEvent) MessageType() string { return orderedType }

// newPayload returns a message value of size bytes numbered seq.
func newPayload(size int, seq int, ordered bool) any {
	b := make([]byte, size)
	binary.BigEndian.PutUint64(b, uint64(seq))
	for i := 8; i < size; i++ {
		b[i] = 'a' + byte(i%26)
	}
	if ordered {
		return orderedEvent{b}
	}
	return event{b}
}

// raw stores a message's bytes as they are: the run measures the outbox, not
// a serializer.
type raw struct{}

func (raw) ContentType() string { return "application/octet-stream" }

func (raw) Marshal(v any) ([]byte, error) {
	switch p := v.(type) {
	case event:
		return p.body, nil
	case orderedEvent:
		return p.body, nil
	}
	return nil, fmt.Errorf("bench: cannot marshal %T", v)
}

func (raw) Unmarshal(data []byte, v any) error {
	return fmt.Errorf("bench: unmarshal is not supported")
}

// delivery is one message the sink was handed and the transport accepted.
type delivery struct {
	id  uuid.UUID
	at  time.Time
	key string
	seq uint64
}

// sink records every delivery, then hands the message on to next, if any
// (a broker), counting it only once next accepted it.
type sink struct {
	next relayer.Transport

	mu         sync.Mutex
	deliveries []delivery
	count      atomic.Int64
}

func (s *sink) Capabilities(ctx context.Context, destination string) (relayer.Capabilities, error) {
	if s.next != nil {
		return s.next.Capabilities(ctx, destination)
	}
	return relayer.Capabilities{MaxBatchSize: 1000, OrderedByKey: true}, nil
}

func (s *sink) Send(ctx context.Context, m *relayer.Message) error {
	if s.next != nil {
		if err := s.next.Send(ctx, m); err != nil {
			return err
		}
	}
	s.record(time.Now(), m)
	return nil
}

func (s *sink) SendBatch(ctx context.Context, ms []*relayer.Message) error {
	if s.next != nil {
		err := s.next.SendBatch(ctx, ms)
		if be, ok := err.(*relayer.BatchError); ok && len(be.Errs) == len(ms) {
			now := time.Now()
			for i, m := range ms {
				if be.Errs[i] == nil {
					s.record(now, m)
				}
			}
			return err
		}
		if err != nil {
			return err
		}
	}
	s.record(time.Now(), ms...)
	return nil
}

func (s *sink) record(at time.Time, ms ...*relayer.Message) {
	s.mu.Lock()
	for _, m := range ms {
		var seq uint64
		if len(m.Body) >= 8 {
			seq = binary.BigEndian.Uint64(m.Body)
		}
		s.deliveries = append(s.deliveries, delivery{id: m.ID, at: at, key: m.Key, seq: seq})
	}
	s.mu.Unlock()
	s.count.Add(int64(len(ms)))
}

// wait blocks until the sink holds n deliveries, ctx ends, limit passes or
// failed (when not nil) reports an error of the workers delivering.
func (s *sink) wait(ctx context.Context, n int64, limit time.Duration, failed func() error) error {
	deadline := time.Now().Add(limit)
	for s.count.Load() < n {
		if err := ctx.Err(); err != nil {
			return err
		}
		if failed != nil {
			if err := failed(); err != nil {
				return err
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d messages delivered after %s", s.count.Load(), n, limit)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// committed is a message a producer committed, and when its commit returned.
type committed struct {
	id uuid.UUID
	at time.Time
}

// check compares what committed with what the sink holds: messages never
// delivered, deliveries beyond the first, and first deliveries of a key whose
// sequence number is not one more than the key's last. It returns the
// commit-to-send latency of each first delivery of a committed message.
func (s *sink) check(commits []committed) (lost, dups, outOfOrder int, latencies []time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	first := make(map[uuid.UUID]time.Time, len(s.deliveries))
	last := map[string]uint64{}
	for _, d := range s.deliveries {
		if _, seen := first[d.id]; seen {
			dups++
			continue
		}
		first[d.id] = d.at
		if d.key != "" {
			if d.seq != last[d.key]+1 {
				outOfOrder++
			}
			last[d.key] = d.seq
		}
	}
	latencies = make([]time.Duration, 0, len(commits))
	for _, c := range commits {
		at, ok := first[c.id]
		if !ok {
			lost++
			continue
		}
		if !c.at.IsZero() {
			latencies = append(latencies, max(0, at.Sub(c.at)))
		}
	}
	return lost, dups, outOfOrder, latencies
}

// longestPause returns the longest time the sink went without a first
// delivery while a committed message waited for one (its commit had
// returned, it was not delivered yet), and when that pause ended, counted
// from the first commit. A stall of the producers' own commits (a
// checkpoint's writes, say) is no pause of dispatch, since nothing waited,
// while a message overtaken by later ones waits from its commit on.
// Repeated deliveries count as nothing, and so do pauses that end within
// warmUp of the first commit, while connections open and plans are made.
func (s *sink) longestPause(commits []committed, warmUp time.Duration) (longest, at time.Duration) {
	waiting := make([]committed, 0, len(commits))
	for _, c := range commits {
		if !c.at.IsZero() {
			waiting = append(waiting, c)
		}
	}
	if len(waiting) == 0 {
		return 0, 0
	}
	slices.SortFunc(waiting, func(a, b committed) int { return a.at.Compare(b.at) })
	s.mu.Lock()
	deliveries := slices.Clone(s.deliveries)
	s.mu.Unlock()
	slices.SortStableFunc(deliveries, func(a, b delivery) int { return a.at.Compare(b.at) })
	delivered := make(map[uuid.UUID]bool, len(deliveries))
	first, next := waiting[0].at, 0
	var prev time.Time
	for _, d := range deliveries {
		if delivered[d.id] {
			continue
		}
		for next < len(waiting) && delivered[waiting[next].id] {
			next++
		}
		if next < len(waiting) && waiting[next].at.Before(d.at) && d.at.Sub(first) >= warmUp {
			// waiting[next], the earliest commit not delivered yet, waited
			// since its commit or since the last delivery, whichever is later.
			since := waiting[next].at
			if prev.After(since) {
				since = prev
			}
			if p := d.at.Sub(since); p > longest {
				longest, at = p, d.at.Sub(first)
			}
		}
		delivered[d.id] = true
		prev = d.at
	}
	return longest, at
}

// percentile returns the p-th percentile (0 to 100) of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p / 100)
	return sorted[i]
}

// withLatencies sets r's percentiles from latencies, sorting them.
func (r *Result) withLatencies(latencies []time.Duration) {
	slices.Sort(latencies)
	r.P50, r.P95, r.P99 = percentile(latencies, 50), percentile(latencies, 95), percentile(latencies, 99)
}
