package dispatch

import (
	"context"
	"sync"
	"time"
)

// stragglers times the sends of one take or batch: once at least one part
// of the work is done (see finish), a send still running slowAfter after it
// began is a straggler, ended with errStraggler.
type stragglers struct {
	slowAfter time.Duration
	mu        sync.Mutex
	running   map[*timedSend]bool
	finished  int
	timer     *time.Timer
	armed     time.Time // when the timer fires; zero when it is idle
}

// timedSend is one send (or group of sends timed as one) that may become a
// straggler.
type timedSend struct {
	cancel  context.CancelCauseFunc
	started time.Time
}

func newStragglers(slowAfter time.Duration) *stragglers {
	w := &stragglers{slowAfter: slowAfter, running: map[*timedSend]bool{}}
	w.timer = time.AfterFunc(time.Hour, w.check)
	w.timer.Stop()
	return w
}

// start returns the context of a send (or of a group of sends timed as one)
// that begins now, and the function to call when it returns.
func (w *stragglers) start(ctx context.Context) (context.Context, func()) {
	gctx, cancel := context.WithCancelCause(ctx)
	g := &timedSend{cancel: cancel}
	w.track(g)
	return gctx, func() {
		w.untrack(g)
		cancel(nil)
	}
}

// track times g from now, arming the timer for when it would become a
// straggler.
func (w *stragglers) track(g *timedSend) {
	w.mu.Lock()
	defer w.mu.Unlock()
	g.started = time.Now()
	w.running[g] = true
	if due := g.started.Add(w.slowAfter); w.timer != nil && (w.armed.IsZero() || due.Before(w.armed)) {
		w.armed = due
		w.timer.Reset(w.slowAfter)
	}
}

// untrack stops timing g, whose send returned.
func (w *stragglers) untrack(g *timedSend) {
	w.mu.Lock()
	delete(w.running, g)
	w.mu.Unlock()
}

// lane returns a timer for the sends of one lane, one at a time, on a
// context of parent's that serves them all until one is ended as a
// straggler: a context per send cost an ordered drain as much as the send.
func (w *stragglers) lane(parent context.Context) *laneTimer {
	return &laneTimer{w: w, parent: parent}
}

// laneTimer times one lane's sends as possible stragglers (see lane).
type laneTimer struct {
	w      *stragglers
	parent context.Context
	ctx    context.Context
	g      *timedSend
}

// start returns the context of a send that begins now.
func (l *laneTimer) start() context.Context {
	if l.g == nil || l.ctx.Err() != nil {
		// The first send, or the last was ended as a straggler.
		if l.g != nil {
			l.g.cancel(nil)
		}
		var cancel context.CancelCauseFunc
		l.ctx, cancel = context.WithCancelCause(l.parent)
		l.g = &timedSend{cancel: cancel}
	}
	l.w.track(l.g)
	return l.ctx
}

// done records that the send started last has returned.
func (l *laneTimer) done() { l.w.untrack(l.g) }

// close ends the lane's context, and with it a send still running on it.
func (l *laneTimer) close() {
	if l.g != nil {
		l.done()
		l.g.cancel(nil)
	}
}

// finish records that one part of the work (a recovery group, an ordered
// lane) is done: from then on, sends older than slowAfter are stragglers.
func (w *stragglers) finish() {
	w.mu.Lock()
	w.finished++
	w.mu.Unlock()
	w.check()
}

// check ends the stragglers, once a part is done, and sets the timer for
// the next send to become one.
func (w *stragglers) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	var next time.Duration
	for g := range w.running {
		age := time.Since(g.started)
		switch {
		case age < w.slowAfter:
			if wait := w.slowAfter - age; next == 0 || wait < next {
				next = wait
			}
		case w.finished > 0:
			g.cancel(errStraggler)
			delete(w.running, g)
		}
	}
	w.armed = time.Time{}
	if next > 0 && w.timer != nil {
		w.armed = time.Now().Add(next)
		w.timer.Reset(next)
	}
}

// close stops the timer.
func (w *stragglers) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timer.Stop()
	w.timer = nil
}
