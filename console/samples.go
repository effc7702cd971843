package console

import (
	"sync"
	"time"

	"github.com/google/uuid"
)

// samplesKept is how many activity samples the throughput chart keeps.
const samplesKept = 180

// sample is the outbox's activity counters at an instant: the rows
// inserted into and deleted from its table, from the server's statistics,
// and, when the outbox has the table of migration 8, what each runner
// recorded it delivered (nil otherwise).
type sample struct {
	at                time.Time
	inserted, deleted int64
	delivered         map[uuid.UUID]int64
}

// deliveredSince returns how many rows were delivered between a and b:
// from the runners' records when both samples have them, each runner's
// growth summed (a runner first recorded after a counts from zero), and
// from the rows deleted otherwise, which also counts rows moved to the dead
// letters and deletes that rolled back.
func deliveredSince(a, b sample) int64 {
	if a.delivered == nil || b.delivered == nil {
		return b.deleted - a.deleted
	}
	var n int64
	for token, count := range b.delivered {
		before, ok := a.delivered[token]
		switch {
		case !ok:
			n += count
		case count > before:
			n += count - before
		}
	}
	return n
}

// samples is a ring of activity samples, taken by Run and as the overview
// is served.
type samples struct {
	mu    sync.Mutex
	ring  []sample
	max   int
	every time.Duration // the least time between two samples
}

func newSamples(max int, every time.Duration) *samples { return &samples{max: max, every: every} }

// due reports whether a new sample should be taken at now: every has
// passed since the last one, within a tenth of it, so that a ticker's
// jitter does not skip a sample.
func (s *samples) due(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ring) == 0 || now.Sub(s.ring[len(s.ring)-1].at) >= s.every-s.every/10
}

func (s *samples) add(x sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.ring); n > 0 && (x.inserted < s.ring[n-1].inserted || x.deleted < s.ring[n-1].deleted) {
		s.ring = s.ring[:0] // the server's statistics were reset
	}
	s.ring = append(s.ring, x)
	if len(s.ring) > s.max {
		s.ring = append(s.ring[:0], s.ring[len(s.ring)-s.max:]...)
	}
}

// rate is the messages written and delivered per second between two
// samples, ending at At.
type rate struct {
	At                 time.Time
	Written, Delivered float64
}

func (s *samples) rates() []rate {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []rate
	for i := 1; i < len(s.ring); i++ {
		a, b := s.ring[i-1], s.ring[i]
		secs := b.at.Sub(a.at).Seconds()
		if secs <= 0 {
			continue
		}
		out = append(out, rate{At: b.at, Written: float64(b.inserted-a.inserted) / secs, Delivered: float64(deliveredSince(a, b)) / secs})
	}
	return out
}
