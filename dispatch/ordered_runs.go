package dispatch

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relayer-go/relayer"
)

// laneRuns runs the lanes of one batch, each on a goroutine of its own
// that calls the transport itself, and lets the batch wait for them with
// one timer: a send that outlives its slow time counts as slow, and one
// that outlives its hand-off time, or the batch's deadline, is handed off,
// so that the batch goes on without its lane while the transport still runs
// it (see keeper). The lane's goroutine hands the transport's result to the
// keeper when it returns, however late. In the common case the batch's
// goroutine sleeps once and is woken once, by the last lane to finish: a
// goroutine and two hand-offs per send cost an ordered batch as much CPU
// as the database's part of it.
type laneRuns struct {
	runs []laneRun
	left atomic.Int32  // lanes still running, plus one until all have started
	all  chan struct{} // closed when left reaches zero
}

// laneRun is what a lane's goroutine and its batch share.
type laneRun struct {
	mu sync.Mutex
	// finished: the lane's goroutine is done with the batch; halted: the
	// batch ended its wait, and the lane starts no more sends.
	finished, halted bool
	// sending is set while the transport runs the send of row, to e, which
	// began at started, counts as slow from slowAt through timer, and is
	// handed off at handAt.
	sending                 bool
	row                     int
	e                       endpoint
	started, slowAt, handAt time.Time
	timer                   *slowTimer
	// handed is set by the batch when it hands the send off: the
	// transport's result goes there.
	handed chan error
}

func newLaneRuns(n int) *laneRuns {
	fs := &laneRuns{runs: make([]laneRun, n), all: make(chan struct{})}
	fs.left.Store(1)
	return fs
}

// start runs lane i's sends, run, on a goroutine of its own. run returns
// errHandedOff when the batch handed its last send off; it has then
// touched nothing of the batch since that send began.
func (fs *laneRuns) start(i int, run func(f *laneRun) error, finished func(err error)) {
	fs.left.Add(1)
	f := &fs.runs[i]
	go func() {
		err := run(f)
		if err == errHandedOff {
			return // the batch counted the lane done when it handed it off
		}
		f.mu.Lock()
		f.finished = true
		f.mu.Unlock()
		finished(err)
		fs.done()
	}()
}

// done counts one lane (or the starting of them all) done.
func (fs *laneRuns) done() {
	if fs.left.Add(-1) == 0 {
		close(fs.all)
	}
}

// wait returns once every lane started has finished or been handed off.
// Meanwhile it counts sends past their slow time as slow, and hands off
// each send still running at its hand-off time, or once ctx (the batch's)
// ends, calling handOff for its lane; a lane between sends when ctx ends
// starts no more. slowAfter is how long after it begins a send that begins
// now counts as slow: no send counts sooner.
func (fs *laneRuns) wait(ctx context.Context, slowAfter func() time.Duration, handOff func(i int, f *laneRun)) {
	fs.done() // every lane has started
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	stopping := false
	for {
		next := fs.check(stopping, slowAfter(), handOff)
		if stopping {
			// Every send is handed off and no lane begins another: the
			// rest finish at once.
			<-fs.all
			return
		}
		select {
		case <-fs.all:
			return
		default:
		}
		wait := max(time.Until(next), time.Millisecond)
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-fs.all:
			return
		case <-timer.C:
		case <-ctx.Done():
			stopping = true
		}
	}
}

// check counts the sends past their slow time as slow and hands off those
// past their hand-off time (every send, when stopping), and returns when
// the next send may cross either.
func (fs *laneRuns) check(stopping bool, slowAfter time.Duration, handOff func(i int, f *laneRun)) time.Time {
	now := time.Now()
	next := now.Add(slowAfter)
	for i := range fs.runs {
		f := &fs.runs[i]
		f.mu.Lock()
		switch {
		case f.finished || f.handed != nil:
		case !f.sending:
			f.halted = stopping
		case stopping || !now.Before(f.handAt):
			f.handed = make(chan error, 1)
			f.timer.crossAt(f.slowAt) // the keeper ends the timer
			handOff(i, f)
			fs.done()
		case !now.Before(f.slowAt):
			f.timer.cross()
			next = minTime(next, f.handAt)
		default:
			next = minTime(next, f.slowAt)
		}
		f.mu.Unlock()
	}
	return next
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// errHalted reports a send not begun because its batch stopped waiting.
var errHalted = fmt.Errorf("ordered send not begun: its batch ran out of time")

// send sends m through tr on sendCtx (ctx, or a child that ends a
// straggler), as row row to e, begun at started, timed by the batch from
// slowAt and handed off at handAt (see wait). A send the batch handed off reports
// errHandedOff once the transport returns, its result gone to the keeper;
// one the batch did not let begin, errHalted; one ended as a straggler,
// errStraggler.
func (f *laneRun) send(ctx, sendCtx context.Context, tr relayer.Transport, m *relayer.Message, row int, e endpoint, timer *slowTimer, started, slowAt, handAt time.Time) error {
	f.mu.Lock()
	if f.halted {
		f.mu.Unlock()
		return errHalted
	}
	f.sending, f.row, f.e, f.timer = true, row, e, timer
	f.started, f.slowAt, f.handAt = started, slowAt, handAt
	f.mu.Unlock()
	err := sendOnce(sendCtx, tr, m)
	f.mu.Lock()
	f.sending = false
	handed := f.handed
	f.mu.Unlock()
	if handed != nil {
		handed <- err
		return errHandedOff
	}
	if err != nil && sendCtx.Err() != nil && ctx.Err() == nil {
		// Ended as a straggler, in time to record it.
		return fmt.Errorf("%w: %w", context.Cause(sendCtx), err)
	}
	return err
}

// sendOnce runs the transport's Send, a panic in it reported as an error.
func sendOnce(ctx context.Context, tr relayer.Transport, m *relayer.Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("transport panicked: %v", p)
		}
	}()
	return tr.Send(ctx, m)
}
