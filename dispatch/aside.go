package dispatch

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

// Destinations are set aside (paused) after a send to them times out or finds
// them unavailable: first for setAsideMin (setAsideUnavailableMin when
// unavailable), then twice as long after each further failure, up to
// setAsideMax (setAsideUnavailableMax when unavailable), each interval
// jittered by up to a fifth so that instances do not come back in step. When
// an interval ends, the destination stays paused until one probe send, made
// by whichever worker claims it first, finds it back: one send at a time
// tests a sick destination, never a flood. A send that has been running for
// a sixth of its deadline sets its destination aside while it runs, so that
// the other workers stop taking that destination's rows before it even times
// out.
const (
	setAsideMin = 5 * time.Second
	setAsideMax = time.Minute
	// setAsideUnavailableMax caps the interval of a destination found
	// unavailable: such a probe is refused at once (the connection is down,
	// no stream captures the subject), so probing every few seconds costs
	// one refused call, and delivery resumes within seconds of the broker's
	// return. A timeout's probe holds a worker for a send's deadline, so it
	// keeps the longer setAsideMax.
	setAsideUnavailableMax = 5 * time.Second
	// pauseRemindEvery is how often a destination still paused is logged
	// again, with what it held since the last line.
	pauseRemindEvery = time.Minute
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
	// token identifies the set's published pauses; dirty wakes the
	// publisher.
	token uuid.UUID
	dirty chan struct{}
	// logger logs each destination's pause and return (see settle) and
	// the reminders of pauses that last (see remind).
	logger *slog.Logger
}

type asideState struct {
	paused  bool          // a send timed out or found it unavailable, and no send completed since
	until   time.Time     // no probe before then
	backoff time.Duration // the last interval
	slow    int           // sends to it running past the slow mark
	probing uint64        // the generation of the probe in flight, or 0
	gen     uint64        // the last probe generation handed out
	since   time.Time     // when the pause began
	lastErr string        // the error that paused it last
	// failures counts the failed sends since the pause began; held, the
	// ordered lanes that waited for it since the last log line, which
	// logged is the time of.
	failures int
	held     map[int]struct{}
	logged   time.Time
}

// aside reports whether workers must pass e over: paused, or slow right now.
func (st *asideState) aside() bool { return st != nil && (st.paused || st.slow > 0) }

func newSetAside() *setAside {
	return &setAside{m: make(map[endpoint]*asideState), token: uuid.New(), dirty: make(chan struct{}, 1), logger: slog.Default()}
}

// setLogger makes logger the one the pauses are logged to.
func (a *setAside) setLogger(logger *slog.Logger) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.logger = logger
}

// hold notes that an ordered lane waits for the paused endpoint e, for the
// next reminder's count.
func (a *setAside) hold(e endpoint, lane int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.m[e]
	if st == nil || !st.paused {
		return
	}
	if st.held == nil {
		st.held = map[int]struct{}{}
	}
	st.held[lane] = struct{}{}
}

// remind logs, once every pauseRemindEvery, each destination still paused
// at now: how long for, the sends that failed since it began, the ordered
// lanes that waited for it since the last line, and the last error.
func (a *setAside) remind(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for e, st := range a.m {
		if !st.paused || now.Sub(st.logged) < pauseRemindEvery {
			continue
		}
		a.logger.Warn("dispatch: destination still unavailable; its rows wait, attempts untouched",
			slog.String("transport", e.transport), slog.String("destination", e.destination),
			slog.Duration("paused_for", now.Sub(st.since).Round(time.Second)), slog.Int("failures", st.failures),
			slog.Int("held_lanes", len(st.held)), slog.Time("next_probe", st.until), slog.String("error", st.lastErr))
		st.held, st.logged = nil, now
	}
}

// skipped reports whether e is set aside now.
func (a *setAside) skipped(e endpoint) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.m[e].aside()
}

// list returns the endpoints set aside now.
func (a *setAside) list() []workerstore.Endpoint {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []workerstore.Endpoint
	for e, st := range a.m {
		if st.aside() {
			out = append(out, workerstore.Endpoint{Transport: e.transport, Destination: e.destination})
		}
	}
	return out
}

// probeDue returns the paused endpoints whose interval has ended and that no
// probe is testing.
func (a *setAside) probeDue() []endpoint {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []endpoint
	now := time.Now()
	for e, st := range a.m {
		if st.paused && st.probing == 0 && st.slow == 0 && !now.Before(st.until) {
			out = append(out, e)
		}
	}
	return out
}

// claimProbe makes the caller the one worker that may send to the paused
// endpoint e, once, to test whether it is back. It returns the probe's
// generation, or 0 when e is not due for a probe (not paused, its interval
// still running, or another probe in flight). The send's outcome, recorded
// as for any send, ends the probe; a caller that ends up not sending calls
// [setAside.release].
func (a *setAside) claimProbe(e endpoint) uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.m[e]
	if st == nil || !st.paused || st.probing != 0 || st.slow > 0 || time.Now().Before(st.until) {
		return 0
	}
	st.gen++
	st.probing = st.gen
	return st.gen
}

// release ends probe gen of e if no send ended it: nothing was learned, and
// another worker may probe at once.
func (a *setAside) release(e endpoint, gen uint64) {
	if gen == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if st := a.m[e]; st != nil && st.probing == gen {
		st.probing = 0
	}
}

// paused returns the paused endpoints, by transport and destination.
func (a *setAside) paused() []store.Pause {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []store.Pause
	for e, st := range a.m {
		if st.paused {
			out = append(out, store.Pause{Transport: e.transport, Destination: e.destination, Since: st.since, NextProbe: st.until, LastError: st.lastErr})
		}
	}
	slices.SortFunc(out, func(x, y store.Pause) int {
		return cmp.Or(cmp.Compare(x.Transport, y.Transport), cmp.Compare(x.Destination, y.Destination))
	})
	return out
}

// changed tells the publisher that the pauses changed; a.mu is held.
func (a *setAside) changed() {
	select {
	case a.dirty <- struct{}{}:
	default:
	}
}

// publish writes the pauses to the outbox's pauses table under the set's
// token whenever they change, and at least every third of
// store.PauseStaleAfter while any lasts, until ctx ends; then it deletes
// them. The core of the workers sharing the set runs one (see
// outboxCore.serve).
func (a *setAside) publish(ctx context.Context, st *workerstore.Store, owner string, logger *slog.Logger) {
	tick := time.NewTicker(store.PauseStaleAfter / 3)
	defer tick.Stop()
	published := false
	for {
		select {
		case <-ctx.Done():
		case <-a.dirty:
		case <-tick.C:
		}
		if ctx.Err() != nil {
			break
		}
		a.remind(time.Now())
		pauses := a.paused()
		if len(pauses) == 0 && !published {
			continue
		}
		if err := st.PublishPauses(ctx, a.token, owner, pauses); err != nil {
			if ctx.Err() == nil {
				logger.Warn("dispatch: paused destinations not published", slog.String("error", err.Error()))
			}
			continue
		}
		published = len(pauses) > 0
	}
	if published {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := st.ClearPauses(cctx, a.token); err != nil {
			logger.Warn("dispatch: published pauses not cleared; they stop counting after "+store.PauseStaleAfter.String(), slog.String("error", err.Error()))
		}
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// slowTimer times one send to an endpoint: it counts the send slow once it
// crossed its slow time, and records how it ended for the endpoint.
type slowTimer struct {
	a       *setAside
	e       endpoint
	timer   *time.Timer // nil when the caller calls cross (see follow)
	crossed bool        // guarded by a.mu
	ended   bool        // guarded by a.mu
}

// timeSend starts following a send to e that must end by deadline: it counts
// as slow once a slowSendDivisor-th of the time left has passed.
func (a *setAside) timeSend(e endpoint, deadline time.Time) *slowTimer {
	w := a.follow(e)
	w.timer = time.AfterFunc(time.Until(deadline)/slowSendDivisor, w.cross)
	return w
}

// follow starts following a send to e whose caller calls cross when the
// send has become slow.
func (a *setAside) follow(e endpoint) *slowTimer {
	return &slowTimer{a: a, e: e}
}

// crossAt counts the send as slow at at, or now if at has passed. It is
// called before the timer passes to another goroutine, which ends it.
func (w *slowTimer) crossAt(at time.Time) {
	if d := time.Until(at); d > 0 {
		w.timer = time.AfterFunc(d, w.cross)
		return
	}
	w.cross()
}

// cross counts the send as slow, unless it has ended or is counted already:
// while it runs, its endpoint is set aside.
func (w *slowTimer) cross() {
	a := w.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if !w.ended && !w.crossed {
		w.crossed = true
		a.state(w.e).slow++
	}
}

func (a *setAside) state(e endpoint) *asideState {
	st := a.m[e]
	if st == nil {
		if len(a.m) >= setAsideEntriesMax {
			now := time.Now()
			for k, v := range a.m {
				if !v.paused && v.slow == 0 && !now.Before(v.until) {
					delete(a.m, k)
				}
			}
		}
		st = &asideState{}
		a.m[e] = st
	}
	return st
}

// outcome is how a timed send ended, for the endpoint's state.
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

// end records how the send ended, with its error: a timeout or an
// unavailable destination sets the endpoint aside for the next interval,
// doubling each time; a send that completed brings it back.
func (w *slowTimer) end(o outcome, err error) {
	if w.timer != nil {
		w.timer.Stop()
	}
	a := w.a
	a.mu.Lock()
	defer a.mu.Unlock()
	w.ended = true
	if st := a.m[w.e]; w.crossed && st != nil {
		st.slow--
	}
	a.settle(w.e, o, err)
}

// record notes how an untimed send to e ended.
func (a *setAside) record(e endpoint, o outcome, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.settle(e, o, err)
}

// settle applies a send's outcome to e's state; a.mu is held. Any outcome
// ends the probe in flight; a failure sets e aside for the next interval,
// unless it is set aside for one that still runs.
func (a *setAside) settle(e endpoint, o outcome, err error) {
	st := a.m[e]
	if st != nil {
		st.probing = 0
	}
	switch {
	case o == timedOut || o == unavailable:
		first, limit := setAsideMin, setAsideMax
		if o == unavailable {
			first, limit = setAsideUnavailableMin, setAsideUnavailableMax
		}
		st = a.state(e)
		if err != nil {
			st.lastErr = err.Error()
		}
		if st.paused {
			st.failures++
		}
		if st.paused && time.Now().Before(st.until) {
			// A send begun before the pause ends in its interval (sends
			// run side by side): it says nothing new, and the interval
			// doubles only once per failed probe.
			return
		}
		began := !st.paused
		if began {
			st.paused, st.since, st.failures, st.held = true, time.Now(), 1, nil
		}
		st.backoff = min(max(2*st.backoff, first), limit)
		jitter := time.Duration(rand.Int64N(int64(st.backoff)/5+1)) - st.backoff/10
		st.until = time.Now().Add(st.backoff + jitter)
		if began {
			st.logged = time.Now()
			what := "timed out"
			if o == unavailable {
				what = "unavailable"
			}
			a.logger.Warn("dispatch: destination "+what+"; paused: its rows wait, attempts untouched, and one probe at a time tests it",
				slog.String("transport", e.transport), slog.String("destination", e.destination),
				slog.Time("next_probe", st.until), slog.String("error", st.lastErr))
		}
		a.changed()
	case o == completed && st != nil:
		if st.paused {
			a.logger.Info("dispatch: destination back; its rows flow again",
				slog.String("transport", e.transport), slog.String("destination", e.destination),
				slog.Duration("paused_for", time.Since(st.since).Round(time.Millisecond)), slog.Int("failures", st.failures))
		}
		if st.slow == 0 {
			delete(a.m, e)
		} else {
			st.paused, st.failures, st.held = false, 0, nil
		}
		a.changed()
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
