package dispatch

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/store"
)

// Slow destinations are set aside for a while after a send to them times out:
// first for setAsideMin, then twice as long after each further timeout, up to
// setAsideMax, each interval jittered by up to a fifth so that instances do
// not come back in step. A send that has been running for a sixth of its
// deadline sets its destination aside while it runs, so that the other
// workers stop taking that destination's rows before it even times out.
const (
	setAsideMin = 5 * time.Second
	setAsideMax = time.Minute
	// slowSendDivisor: a send slower than its deadline divided by this is slow.
	slowSendDivisor = 6
	// setAsideEntriesMax bounds the endpoints remembered; beyond it, those
	// whose interval ended are forgotten.
	setAsideEntriesMax = 1024
)

// setAside is the destinations a dispatcher's workers pass over because sends
// to them are slow or time out: their rows stay in the table, untouched and
// with their attempts unspent, while the other destinations flow. Workers
// that share one (a direct dispatcher and the recovery it wakes) skip the same
// destinations. It is safe for concurrent use.
type setAside struct {
	mu sync.Mutex
	m  map[endpoint]*asideState
}

type asideState struct {
	until   time.Time     // set aside until then, after a timeout
	backoff time.Duration // the last interval
	slow    int           // sends to it running past the slow mark
}

func newSetAside() *setAside { return &setAside{m: make(map[endpoint]*asideState)} }

// skipped reports whether e is set aside now.
func (a *setAside) skipped(e endpoint) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.m[e]
	return st != nil && (st.slow > 0 || time.Now().Before(st.until))
}

// list returns the endpoints set aside now.
func (a *setAside) list() []store.Endpoint {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []store.Endpoint
	now := time.Now()
	for e, st := range a.m {
		if st.slow > 0 || now.Before(st.until) {
			out = append(out, store.Endpoint{Transport: e.transport, Destination: e.destination})
		}
	}
	return out
}

// sendWatch follows one send to an endpoint.
type sendWatch struct {
	a       *setAside
	e       endpoint
	timer   *time.Timer
	crossed bool // guarded by a.mu
	ended   bool // guarded by a.mu
}

// watch starts following a send to e that must end by deadline.
func (a *setAside) watch(e endpoint, deadline time.Time) *sendWatch {
	w := &sendWatch{a: a, e: e}
	w.timer = time.AfterFunc(time.Until(deadline)/slowSendDivisor, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if !w.ended {
			w.crossed = true
			a.state(e).slow++
		}
	})
	return w
}

func (a *setAside) state(e endpoint) *asideState {
	st := a.m[e]
	if st == nil {
		if len(a.m) >= setAsideEntriesMax {
			now := time.Now()
			for k, v := range a.m {
				if v.slow == 0 && !now.Before(v.until) {
					delete(a.m, k)
				}
			}
		}
		st = &asideState{}
		a.m[e] = st
	}
	return st
}

// outcome is how a watched send ended, for the endpoint's state.
type outcome int

const (
	// completed: delivered, or refused by the broker for reasons of the
	// message; the endpoint is back.
	completed outcome = iota
	// timedOut: the send ran into its deadline.
	timedOut
	// unavailable: the broker or the destination is down
	// (relayer.ErrUnavailable).
	unavailable
	// interrupted: the worker is stopping; says nothing of the endpoint.
	interrupted
)

// setAsideUnavailableMin is the first interval an unavailable destination is
// set aside for; a timeout's is setAsideMin, since each try costs a claim's
// deadline.
const setAsideUnavailableMin = time.Second

// end records how the send ended: a timeout or an unavailable destination
// sets the endpoint aside for the next interval, doubling each time; a send
// that completed brings it back.
func (w *sendWatch) end(o outcome) {
	w.timer.Stop()
	a := w.a
	a.mu.Lock()
	defer a.mu.Unlock()
	w.ended = true
	if st := a.m[w.e]; w.crossed && st != nil {
		st.slow--
	}
	a.settle(w.e, o)
}

// record notes how an unwatched send to e ended.
func (a *setAside) record(e endpoint, o outcome) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.settle(e, o)
}

// settle applies a send's outcome to e's state; a.mu is held.
func (a *setAside) settle(e endpoint, o outcome) {
	st := a.m[e]
	switch {
	case o == timedOut || o == unavailable:
		first := setAsideMin
		if o == unavailable {
			first = setAsideUnavailableMin
		}
		st = a.state(e)
		st.backoff = min(max(2*st.backoff, first), setAsideMax)
		jitter := time.Duration(rand.Int64N(int64(st.backoff)/5+1)) - st.backoff/10
		st.until = time.Now().Add(st.backoff + jitter)
	case o == completed && st != nil && st.slow == 0:
		delete(a.m, e)
	}
}

// outcomeOf classifies a send's error; stopping is whether the worker's own
// context ended.
func outcomeOf(err error, stopping bool) outcome {
	switch {
	case err == nil:
		return completed
	case stopping:
		return interrupted
	case errors.Is(err, context.DeadlineExceeded):
		return timedOut
	case errors.Is(err, relayer.ErrUnavailable):
		return unavailable
	}
	return completed
}
