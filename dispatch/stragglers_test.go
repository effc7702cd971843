package dispatch

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A lane's sends share a context until one is ended as a straggler, once
// another part of the work is done; the lane's next send runs on a fresh
// one, and closing the lane ends it.
func TestLaneStragglerRenewsItsContextAfterAStraggler(t *testing.T) {
	w := newStragglers(20 * time.Millisecond)
	defer w.close()
	l := w.lane(context.Background())
	first := l.start()
	l.done()
	if second := l.start(); second != first {
		t.Error("a lane's sends do not share their context")
	}
	w.finish() // another lane is done: this lane's send becomes a straggler after 20 ms
	select {
	case <-first.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the slow send was never ended")
	}
	if !errors.Is(context.Cause(first), errStraggler) {
		t.Errorf("the slow send ended with %v, want errStraggler", context.Cause(first))
	}
	l.done()
	next := l.start()
	if next.Err() != nil {
		t.Fatalf("the send after a straggler starts ended: %v", next.Err())
	}
	l.done()
	l.close()
	if next.Err() == nil {
		t.Error("closing the lane leaves its context running")
	}
}
