package dispatch

import (
	"context"
	"errors"
	"sync"
)

// loop is the lifecycle shared by workers whose Stop cancels their one
// background goroutine: a first Start runs it, later Starts fail, Stop cancels
// and waits within its context, and Run blocks until the goroutine ends.
type loop struct {
	mu      sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{}
}

func newLoop() loop { return loop{done: make(chan struct{})} }

// start runs body on its own goroutine; body must return when ctx ends.
func (l *loop) start(ctx context.Context, what string, body func(ctx context.Context)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return ErrStopped
	}
	if l.started {
		return errors.New("dispatch: " + what + " already started")
	}
	l.started = true
	ctx, l.cancel = context.WithCancel(ctx)
	go func() {
		defer close(l.done)
		body(ctx)
	}()
	return nil
}

func (l *loop) stop(ctx context.Context) error {
	l.mu.Lock()
	l.stopped = true
	started := l.started
	l.mu.Unlock()
	if !started {
		return nil
	}
	l.cancel()
	select {
	case <-l.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *loop) run(ctx context.Context, what string, body func(ctx context.Context)) error {
	if err := l.start(ctx, what, body); err != nil {
		return err
	}
	<-l.done
	return ctx.Err()
}
