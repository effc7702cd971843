package dispatch

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
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

// failProbes fails n probes of e in a row, each as soon as its interval
// ends, with outcome o.
func failProbes(a *setAside, e endpoint, n int, o outcome, err error) {
	for range n {
		a.mu.Lock()
		if st := a.m[e]; st != nil {
			st.until = time.Now().Add(-time.Millisecond)
		}
		a.mu.Unlock()
		gen := a.claimProbe(e)
		a.record(e, o, err)
		a.release(e, gen)
	}
}

// A destination found unavailable is probed again within a few seconds
// however long it has been down, so that delivery resumes soon after the
// broker's return; one that times out keeps the longer cap, as each of its
// probes holds a worker for a send's deadline. Before, an unavailable
// destination's interval doubled up to a minute, and delivery resumed up to
// a minute after the broker came back.
func TestSetAsideUnavailableProbesWithinSeconds(t *testing.T) {
	a := newSetAside()
	down := errors.Join(errors.New("broker down"), relayer.ErrUnavailable)
	e := endpoint{"mem", "down"}
	failProbes(a, e, 12, unavailable, down)
	if wait := time.Until(a.m[e].until); wait > setAsideUnavailableMax*6/5 || setAsideUnavailableMax > 10*time.Second {
		t.Fatalf("after 12 failed probes the next is %s away, want at most %s (a few seconds)", wait.Round(time.Millisecond), setAsideUnavailableMax*6/5)
	}
	slow := endpoint{"mem", "slow"}
	failProbes(a, slow, 12, timedOut, context.DeadlineExceeded)
	if got := a.m[slow].backoff; got != setAsideMax {
		t.Fatalf("after 12 timed-out probes the interval is %s, want %s", got, setAsideMax)
	}
	// Timeouts first, then the broker refuses at once: the short cap.
	failProbes(a, slow, 1, unavailable, down)
	if got := a.m[slow].backoff; got > setAsideUnavailableMax {
		t.Fatalf("an unavailable probe after timeouts left the interval at %s, want at most %s", got, setAsideUnavailableMax)
	}
}

// logLines is a slog handler's output, safe for concurrent use.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logLines) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), substr)
}

// A pause is logged once when it begins, whichever number of sends and
// lanes find the destination down, once when it ends, and in between at
// most once a pauseRemindEvery, with the failures and held lanes since.
func TestSetAsideLogsPausesOnce(t *testing.T) {
	var out logLines
	a := newSetAside()
	a.setLogger(slog.New(slog.NewTextHandler(&out, nil)))
	e := endpoint{"events", "orders.placed"}
	down := errors.Join(errors.New("no responders"), relayer.ErrUnavailable)
	for lane := range 79 {
		a.record(e, unavailable, down)
		a.hold(e, lane)
	}
	failProbes(a, e, 5, unavailable, down)
	if n := out.count("level=WARN"); n != 1 || out.count("destination=orders.placed") != 1 {
		t.Fatalf("%d warnings for one destination paused by 84 failures, want 1:\n%s", n, out.buf.String())
	}
	a.remind(time.Now())
	if n := out.count("level=WARN"); n != 1 {
		t.Fatalf("a reminder right after the pause began:\n%s", out.buf.String())
	}
	a.remind(time.Now().Add(pauseRemindEvery))
	if out.count("still unavailable") != 1 || out.count("failures=84") != 1 || out.count("held_lanes=79") != 1 {
		t.Fatalf("the reminder after %s, want one with failures=84 held_lanes=79:\n%s", pauseRemindEvery, out.buf.String())
	}
	a.remind(time.Now().Add(pauseRemindEvery + time.Second))
	if out.count("still unavailable") != 1 {
		t.Fatalf("a second reminder within %s:\n%s", pauseRemindEvery, out.buf.String())
	}
	a.record(e, completed, nil)
	if out.count("level=INFO") != 1 || out.count("destination back") != 1 {
		t.Fatalf("the destination's return is not logged once at info:\n%s", out.buf.String())
	}
}
