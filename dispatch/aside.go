package dispatch

import (
	"math/rand/v2"
	"sync"
	"time"

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

// end records how the send ended: timedOut sets the endpoint aside for the
// next interval; a send that completed in time (delivered or refused by the
// broker) brings it back.
func (w *sendWatch) end(timedOut bool) {
	w.timer.Stop()
	a := w.a
	a.mu.Lock()
	defer a.mu.Unlock()
	w.ended = true
	st := a.m[w.e]
	if w.crossed && st != nil {
		st.slow--
	}
	switch {
	case timedOut:
		st = a.state(w.e)
		st.backoff = min(max(2*st.backoff, setAsideMin), setAsideMax)
		jitter := time.Duration(rand.Int64N(int64(st.backoff)/5+1)) - st.backoff/10
		st.until = time.Now().Add(st.backoff + jitter)
	case st != nil && st.slow == 0:
		delete(a.m, w.e)
	}
}
