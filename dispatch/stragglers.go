package dispatch

import (
	"context"
	"sync"
	"time"
)

// stragglers watches the sends of one take or batch: once at least one part
// of the work is done (see finish), a send still running slowAfter after it
// began is ended with errStraggler.
type stragglers struct {
	slowAfter time.Duration
	mu        sync.Mutex
	running   map[*straggler]bool
	finished  int
	timer     *time.Timer
	armed     time.Time // when the timer fires; zero when it is idle
}

type straggler struct {
	cancel  context.CancelCauseFunc
	started time.Time
}

func newStragglers(slowAfter time.Duration) *stragglers {
	w := &stragglers{slowAfter: slowAfter, running: map[*straggler]bool{}}
	w.timer = time.AfterFunc(time.Hour, w.check)
	w.timer.Stop()
	return w
}

// start returns the context of a send (or of a group of sends timed as one)
// that begins now, and the function to call when it returns.
func (w *stragglers) start(ctx context.Context) (context.Context, func()) {
	gctx, cancel := context.WithCancelCause(ctx)
	g := &straggler{cancel: cancel}
	w.track(g)
	return gctx, func() {
		w.untrack(g)
		cancel(nil)
	}
}

// track times g from now, arming the timer for when it would become a
// straggler.
func (w *stragglers) track(g *straggler) {
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
func (w *stragglers) untrack(g *straggler) {
	w.mu.Lock()
	delete(w.running, g)
	w.mu.Unlock()
}

// lane returns a watch for the sends of one lane, one at a time, on a
// context of parent's that serves them all until one is ended as a
// straggler: a context per send cost an ordered drain as much as the send.
func (w *stragglers) lane(parent context.Context) *laneStraggler {
	return &laneStraggler{w: w, parent: parent}
}

// laneStraggler watches one lane's sends for stragglers (see lane).
type laneStraggler struct {
	w      *stragglers
	parent context.Context
	ctx    context.Context
	g      *straggler
}

// start returns the context of a send that begins now.
func (l *laneStraggler) start() context.Context {
	if l.g == nil || l.ctx.Err() != nil {
		// The first send, or the last was ended as a straggler.
		if l.g != nil {
			l.g.cancel(nil)
		}
		var cancel context.CancelCauseFunc
		l.ctx, cancel = context.WithCancelCause(l.parent)
		l.g = &straggler{cancel: cancel}
	}
	l.w.track(l.g)
	return l.ctx
}

// done records that the send started last has returned.
func (l *laneStraggler) done() { l.w.untrack(l.g) }

// close ends the lane's context, and with it a send still running on it.
func (l *laneStraggler) close() {
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

// close stops the watch.
func (w *stragglers) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timer.Stop()
	w.timer = nil
}
