package dispatch

import (
	"context"
	"sync"
	"time"
)

// recordGrace is how long work in flight may go on after its worker's
// context is cancelled: sends already handed to a transport return, and
// their outcome is recorded and committed, so that cancelling a worker (the
// documented way to stop [Runner.Run]) does not send again what it had
// sent. No new row is admitted once the context is cancelled.
const recordGrace = 10 * time.Second

// detach returns a context for one unit of work begun under ctx: it keeps
// ctx's values, ends at deadline (none when zero), and ends recordGrace after
// ctx is cancelled rather than at once; it ends at once when the worker's
// Stop runs out of time (see loop). The returned function releases it; call
// it when the work is done.
func detach(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	work, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if !deadline.IsZero() {
		var cancelDeadline context.CancelFunc
		work, cancelDeadline = context.WithDeadline(work, deadline)
		parent := cancel
		cancel = func() { cancelDeadline(); parent() }
	}
	var (
		mu    sync.Mutex
		timer *time.Timer
		ended bool
	)
	stopKill := func() bool { return false }
	if killed, ok := ctx.Value(killKey{}).(context.Context); ok {
		stopKill = context.AfterFunc(killed, cancel)
	}
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !ended {
			timer = time.AfterFunc(recordGrace, cancel)
		}
	})
	return work, func() {
		stop()
		stopKill()
		mu.Lock()
		ended = true
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

// halted reports whether ctx, a worker's context, was cancelled: work in
// flight then admits nothing new.
func halted(ctx context.Context) bool { return ctx.Err() != nil }
