package consume_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relayer-go/relayer/consume"
)

// Stop lets the running functions finish within the drain, keeping their
// context alive though the adapter's ended; past the drain it ends their
// context.
func TestPoolDrainsThenEnds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	w := consume.NewPool(ctx, 2, 200*time.Millisecond)
	var quick, slowEnded atomic.Bool
	started := make(chan struct{}, 2)
	w.Go(ctx, func(hctx context.Context) {
		started <- struct{}{}
		time.Sleep(50 * time.Millisecond)
		quick.Store(hctx.Err() == nil)
	})
	w.Go(ctx, func(hctx context.Context) {
		started <- struct{}{}
		<-hctx.Done()
		slowEnded.Store(true)
	})
	<-started
	<-started
	cancel()
	if w.Go(ctx, func(context.Context) {}) {
		t.Error("Go took a function after its context ended, with every worker busy")
	}
	begin := time.Now()
	w.Stop()
	took := time.Since(begin)
	if !quick.Load() || !slowEnded.Load() {
		t.Errorf("quick finished with a live context: %v; slow saw its context end: %v", quick.Load(), slowEnded.Load())
	}
	if took < 150*time.Millisecond || took > 2*time.Second {
		t.Errorf("Stop took %s, want about the 200ms drain", took)
	}
}
