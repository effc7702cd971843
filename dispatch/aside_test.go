package dispatch

import (
	"errors"
	"testing"
	"time"

	"github.com/relayer-go/relayer"
)

// Failures of sends that ran side by side set their destination aside for
// one interval: only a failed probe doubles it. Before, each of a batch's
// lanes that found the destination down doubled the interval, so that one
// outage seen by 16 lanes at once set it aside for the maximum.
func TestSetAsideDoublesOncePerProbe(t *testing.T) {
	a := newSetAside()
	e := endpoint{"mem", "d"}
	down := errors.Join(errors.New("broker down"), relayer.ErrUnavailable)
	for range 16 {
		a.record(e, unavailable, down)
	}
	if got := a.m[e].backoff; got != setAsideUnavailableMin {
		t.Fatalf("16 failures in one interval set the destination aside for %s, want %s", got, setAsideUnavailableMin)
	}
	a.m[e].until = time.Now().Add(-time.Millisecond) // the interval ends
	gen := a.claimProbe(e)
	if gen == 0 {
		t.Fatal("no probe claimed once the interval ended")
	}
	a.record(e, unavailable, down)
	if got := a.m[e].backoff; got != 2*setAsideUnavailableMin {
		t.Fatalf("a failed probe set the interval to %s, want %s", got, 2*setAsideUnavailableMin)
	}
	if a.skipped(e) != true || a.m[e].probing != 0 {
		t.Fatal("after a failed probe the destination must stay aside with no probe in flight")
	}
	a.record(e, completed, nil)
	if a.skipped(e) {
		t.Fatal("a completed send must bring the destination back")
	}
}
