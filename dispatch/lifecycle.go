package dispatch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
)

// ownerOrDefault describes a leased worker instance for operators reading the
// leases table: the given owner, or host name and process id.
func ownerOrDefault(owner string) string {
	if owner != "" {
		return owner
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}

// loop is the lifecycle every worker kind shares: a first Start runs its body
// on a goroutine, later Starts fail, Stop ends it and returns once the body
// has returned, and Run blocks until the body ends. A graceful loop's Stop
// first closes quit and lets the body finish its work in flight, cancelling
// only when Stop's context ends; otherwise Stop cancels at once.
type loop struct {
	graceful bool
	mu       sync.Mutex
	started  bool
	stopped  bool
	cancel   context.CancelFunc
	quit     chan struct{}
	done     chan struct{}
	// killed ends when Stop's context ends: work detached from the body's
	// context (see detach) ends then too, without its grace.
	killed context.Context
	kill   context.CancelFunc
}

func newLoop(graceful bool) loop {
	killed, kill := context.WithCancel(context.Background())
	return loop{graceful: graceful, quit: make(chan struct{}), done: make(chan struct{}), killed: killed, kill: kill}
}

// killKey is the context key under which a body's context carries its
// loop's killed context.
type killKey struct{}

// quitting reports whether Stop asked a graceful body to finish.
func (l *loop) quitting() bool {
	select {
	case <-l.quit:
		return true
	default:
		return false
	}
}

// isStarted reports whether a Start succeeded.
func (l *loop) isStarted() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.started
}

// start runs body on its own goroutine; body must return when ctx ends.
func (l *loop) start(ctx context.Context, what string, body func(ctx context.Context)) error {
	return l.startAfter(ctx, what, nil, body)
}

// startAfter is start with a step run first, synchronously and under the
// lifecycle's lock: when prepare fails, nothing starts, the error is
// returned, and a later Start may try again.
func (l *loop) startAfter(ctx context.Context, what string, prepare func(ctx context.Context) error, body func(ctx context.Context)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return ErrStopped
	}
	if l.started {
		return errors.New("dispatch: " + what + " already started")
	}
	if prepare != nil {
		if err := prepare(ctx); err != nil {
			return err
		}
	}
	l.started = true
	ctx, l.cancel = context.WithCancel(context.WithValue(ctx, killKey{}, l.killed))
	go func() {
		defer close(l.done)
		body(ctx)
	}()
	return nil
}

func (l *loop) stop(ctx context.Context) error {
	l.mu.Lock()
	if !l.stopped {
		l.stopped = true
		close(l.quit)
	}
	started := l.started
	l.mu.Unlock()
	if !started {
		return nil
	}
	if l.graceful {
		select {
		case <-l.done:
			return nil
		case <-ctx.Done():
		}
	}
	// Cancelled: wait for the body to return, so that no goroutine outlives
	// Stop. Stop's deadline has passed: work in flight ends at once.
	l.kill()
	l.cancel()
	<-l.done
	return ctx.Err()
}

func (l *loop) run(ctx context.Context, what string, body func(ctx context.Context)) error {
	if err := l.start(ctx, what, body); err != nil {
		return err
	}
	<-l.done
	return ctx.Err()
}

// setDefault sets *v to def when *v is its type's zero value: an option left
// unset takes its default.
func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}
