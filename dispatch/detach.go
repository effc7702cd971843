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

// commitGrace is how long work in flight keeps its context once the sends
// it still waits for are abandoned, recordGrace after the cancellation: time
// to keep their rows for another worker and commit what the other sends
// did, so that one send that outlives the grace makes only its own rows go
// out again, not its whole take or batch.
const commitGrace = 5 * time.Second

// sendCutKey carries, in a detached context, the channel closed when the
// sends still running must be abandoned (see detach and send).
type sendCutKey struct{}

// sendCut returns the channel closed when ctx's sends must be abandoned, or
// nil when ctx was not detached.
func sendCut(ctx context.Context) <-chan struct{} {
	cut, _ := ctx.Value(sendCutKey{}).(<-chan struct{})
	return cut
}

// detach returns a context for one unit of work begun under ctx: it keeps
// ctx's values, ends at deadline (none when zero), and ends recordGrace plus
// commitGrace after ctx is cancelled rather than at once, its sends being
// abandoned after recordGrace; it ends at once when the worker's Stop runs
// out of time (see loop). The returned function releases it; call it when
// the work is done.
func detach(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	cut := make(chan struct{})
	work, cancel := context.WithCancel(context.WithValue(context.WithoutCancel(ctx), sendCutKey{}, (<-chan struct{})(cut)))
	if !deadline.IsZero() {
		var cancelDeadline context.CancelFunc
		work, cancelDeadline = context.WithDeadline(work, deadline)
		parent := cancel
		cancel = func() { cancelDeadline(); parent() }
	}
	var (
		mu           sync.Mutex
		cutAt, endAt *time.Timer
		ended        bool
	)
	stopKill := func() bool { return false }
	if killed, ok := ctx.Value(killKey{}).(context.Context); ok {
		stopKill = context.AfterFunc(killed, cancel)
	}
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !ended {
			cutAt = time.AfterFunc(recordGrace, func() { close(cut) })
			endAt = time.AfterFunc(recordGrace+commitGrace, cancel)
		}
	})
	return work, func() {
		stop()
		stopKill()
		mu.Lock()
		ended = true
		if cutAt != nil {
			cutAt.Stop()
			endAt.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

// halted reports whether ctx, a worker's context, was cancelled: work in
// flight then admits nothing new.
func halted(ctx context.Context) bool { return ctx.Err() != nil }
