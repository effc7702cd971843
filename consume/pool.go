package consume

import (
	"context"
	"sync"
	"time"
)

// Pool is a fixed number of goroutines that run an adapter's deliveries,
// and stop the way a consumer must: taking nothing new, and letting the
// deliveries being handled commit and be settled within a drain timeout
// before their context ends. Make one with [NewPool]; an adapter hands
// each broker message over with [Pool.Go] and calls [Pool.Stop] once it
// stopped receiving.
type Pool struct {
	work  chan func(context.Context)
	hctx  context.Context
	end   context.CancelFunc
	drain time.Duration
	wg    sync.WaitGroup
	once  sync.Once
}

// NewPool starts n goroutines (at least one). The context they hand
// each function carries ctx's values but not its end: it ends when Stop's
// drain runs out, so that a consumer whose ctx ended still commits and
// acknowledges what it is handling.
func NewPool(ctx context.Context, n int, drain time.Duration) *Pool {
	hctx, end := context.WithCancel(context.WithoutCancel(ctx))
	w := &Pool{work: make(chan func(context.Context)), hctx: hctx, end: end, drain: drain}
	for range max(n, 1) {
		w.wg.Go(func() {
			for f := range w.work {
				f(w.hctx)
			}
		})
	}
	return w
}

// Go runs f on the next free goroutine, waiting for one until ctx ends; it
// reports whether one took f. f gets the pool's context, for
// Consumer.Handle.
func (w *Pool) Go(ctx context.Context, f func(ctx context.Context)) bool {
	select {
	case w.work <- f:
		return true
	case <-ctx.Done():
		return false
	}
}

// Stop takes no more functions and waits for those running, up to the
// drain timeout; then it ends their context, so that nothing uncommitted is
// settled, and waits for them to return. Go must not be called after Stop.
func (w *Pool) Stop() {
	w.once.Do(func() {
		close(w.work)
		drained := make(chan struct{})
		go func() {
			w.wg.Wait()
			close(drained)
		}()
		t := time.NewTimer(w.drain)
		defer t.Stop()
		select {
		case <-drained:
		case <-t.C:
			w.end()
			<-drained
		}
		w.end()
	})
}
