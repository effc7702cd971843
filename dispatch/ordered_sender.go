package dispatch

import (
	"context"
	"fmt"
	"time"

	"github.com/relayer-go/relayer"
)

// laneSender runs one lane's sends of a batch, one after the other, on a
// goroutine of its own, so that the lane can stop waiting for a send that
// outlives its hand-off time while the transport still runs it (see
// keeper). One goroutine and one timer serve all the lane's rows of the
// batch: a goroutine, a channel and two timers per message cost a drain as
// much CPU as the sends themselves. The zero value is ready to use; close
// ends it.
type laneSender struct {
	reqs  chan laneSendReq
	done  chan error // buffered, so the goroutine never waits for a reader
	timer *time.Timer
}

type laneSendReq struct {
	ctx context.Context
	tr  relayer.Transport
	m   *relayer.Message
}

// send sends m through tr on sendCtx (ctx, or a child that ends a
// straggler) and waits for the transport to return until handAt, or until
// ctx ends. Once slowAt has passed with the send still running, watch
// counts it as slow, which sets its endpoint aside for the other lanes. A
// send still running at handAt is handed off: send returns errHandedOff and
// the channel the transport's result will arrive on, and the caller's lane
// goes to a keeper, which holds the lane, so that no other owner sends it,
// until the transport returns however late. The lane sends nothing more in
// the batch. A send ended as a straggler reports errStraggler.
func (s *laneSender) send(ctx, sendCtx context.Context, tr relayer.Transport, m *relayer.Message, watch *sendWatch, slowAt, handAt time.Time) (<-chan error, error) {
	if s.reqs == nil {
		s.reqs, s.done = make(chan laneSendReq), make(chan error, 1)
		go runLaneSends(s.reqs, s.done)
	}
	s.reqs <- laneSendReq{ctx: sendCtx, tr: tr, m: m}
	next := slowAt
	if handAt.Before(next) {
		next = handAt
	}
	s.wait(next)
	for {
		select {
		case err := <-s.done:
			s.timer.Stop()
			if err != nil && sendCtx.Err() != nil && ctx.Err() == nil {
				// Ended as a straggler, in time to record it.
				return nil, fmt.Errorf("%w: %w", context.Cause(sendCtx), err)
			}
			return nil, err
		case <-s.timer.C:
			if time.Now().Before(handAt) {
				watch.cross()
				s.wait(handAt)
				continue
			}
		case <-ctx.Done():
			s.timer.Stop()
		}
		watch.crossAt(slowAt) // the keeper ends the watch
		return s.done, errHandedOff
	}
}

// wait sets the timer to fire at at.
func (s *laneSender) wait(at time.Time) {
	if s.timer == nil {
		s.timer = time.NewTimer(time.Until(at))
		return
	}
	s.timer.Reset(time.Until(at))
}

// close ends the goroutine once the send it runs, if any, has returned; a
// send handed off delivers its result to its keeper all the same.
func (s *laneSender) close() {
	if s.reqs != nil {
		close(s.reqs)
		s.reqs = nil
	}
	if s.timer != nil {
		s.timer.Stop()
	}
}

// runLaneSends runs the sends of reqs, one at a time, until reqs is closed.
func runLaneSends(reqs <-chan laneSendReq, done chan<- error) {
	for r := range reqs {
		done <- r.send()
	}
}

// send runs the transport's Send, a panic in it reported as an error.
func (r laneSendReq) send() (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("transport panicked: %v", p)
		}
	}()
	return r.tr.Send(r.ctx, r.m)
}
