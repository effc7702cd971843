package dispatch

import (
	"slices"

	"github.com/relayer-go/relayer/store"
)

// Paused returns the destinations the runner's workers pass over while their
// broker is down or slow (they share one view), with when each pause began,
// when a probe may next test it, and the error that paused it. The workers
// also publish them to the outbox's pauses table, where store.Pauses and
// "relayer stats" read them.
func (r *Runner) Paused() []store.Pause { return r.core.aside.paused() }

// RunnerStats is a snapshot of a [Runner]'s counters, per worker.
type RunnerStats struct {
	// Direct is direct dispatch's counters; nil when it is turned off.
	Direct *Stats
	// Recovery is recovery's counters; nil when it is turned off.
	Recovery *Stats
	// Ordered holds each ordered worker's counters and lanes, in the order
	// the runner made them; empty when it runs none.
	Ordered []OrderedStats
	// Cleanup is retention cleanup's counters; nil when it is turned off.
	Cleanup *CleanupStats
	// Listening reports whether the wake-up listener (RunnerOptions.Listen)
	// is subscribed now; false without one.
	Listening bool
	// WakeUpsReceived counts the wake-up notifications the listener has
	// received.
	WakeUpsReceived uint64
	// RowsBeyondLanes is how many pending rows (counted up to 10,000) the
	// ordered workers' last heartbeat found in lanes outside the outbox's
	// lane count: rows no worker delivers, written by a program configured
	// with another lane count. Anything but zero is also logged as an
	// error at each heartbeat; zero when the runner runs no ordered worker.
	RowsBeyondLanes int64
}

// OrderedStats are one ordered worker's counters and the lanes it holds.
type OrderedStats struct {
	// Name is the worker's name in the lane group: OrderedOptions.Name (the
	// host name by default) followed by "ordered-" and its number.
	Name string
	// Lanes are the lanes the worker holds now, ascending.
	Lanes []int
	// Stats are the worker's counters.
	Stats Stats
}

// Stats returns the counters of the runner's workers. After a Start that
// failed, they are the new workers' (from zero).
func (r *Runner) Stats() RunnerStats {
	c := r.crew.Load()
	var s RunnerStats
	if c.direct != nil {
		s.Direct = ptr(c.direct.Stats())
	}
	if c.recovery != nil {
		s.Recovery = ptr(c.recovery.Stats())
	}
	for _, o := range c.ordered {
		s.Ordered = append(s.Ordered, OrderedStats{Name: o.Name(), Lanes: o.Lanes(), Stats: o.Stats()})
		s.RowsBeyondLanes = max(s.RowsBeyondLanes, o.RowsBeyondLanes())
	}
	if c.cleanup != nil {
		s.Cleanup = ptr(c.cleanup.Stats())
	}
	if c.listener != nil {
		s.Listening = c.listener.isListening()
		s.WakeUpsReceived = c.listener.receivedCount()
	}
	return s
}

func ptr[T any](v T) *T { return &v }

// Lanes returns the lanes the runner's ordered workers hold now, ascending.
func (r *Runner) Lanes() []int {
	var lanes []int
	for _, o := range r.crew.Load().ordered {
		lanes = append(lanes, o.Lanes()...)
	}
	slices.Sort(lanes)
	return lanes
}
