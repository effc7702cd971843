package dispatch

// Keepers: the lane of an ordered straggler leaves its batch, which commits
// the other lanes, and is held by a keeper until the send returns (see
// "Slow sends" in the package doc).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

// stuckLogEvery is how often a keeper logs that its send still runs.
const stuckLogEvery = 10 * time.Second

// straggler is an ordered straggler handed off: a send still running when
// its batch handed its lane off to a keeper.
type straggler struct {
	lane int
	e    endpoint
	// row is the index of the row in its laneBatch's rows; msg is a copy
	// of it, for the keeper.
	row     int
	msg     store.Row
	done    <-chan error // the transport's result
	started time.Time
	timer   *slowTimer
	member  *orderedWorker // whose share the lane is in, for counts and logs
}

// keeper holds the lane of a straggler handed off by its batch (see laneRuns)
// until the transport returns, then records what it can and reports the
// lane as done on the group loop's results. The batch renewed the lane's
// lease before it committed, so that no other owner can take the lane
// until the keeper holds it. The keeper holds it in a transaction of its
// own connection that locks the lease row, as a batch does: no other owner
// takes the lane while that transaction is connected, even past the
// lease's expiry. Every third of the lease it renews the lease and commits,
// then locks it again, so that other workers see the lane taken and do not
// wait on the lock. It logs, at Warn, that the send is still running, with
// its transport, destination, lane and how long, at once and every
// stuckLogEvery.
//
// When the transport returns: a send that succeeded has its row deleted;
// one that failed for a reason of its own is recorded as a failure; one
// that failed because its context ended (the batch had moved on) is
// unknown, and its row is left untouched, its attempts unspent, to be sent
// again. Only Stop running out of time (see detach) ends a keeper sooner:
// its transaction rolls back, and whatever the transport does afterwards
// is a possible duplicate, as with a crash.
func (s *groupLoop) keeper(h *straggler) {
	g := s.g
	res := laneDone{lanes: []int{h.lane}, kept: true, batchResult: batchResult{slow: []int{h.lane}}}
	defer func() { s.results <- res }()
	k := newKeeperHold(g, h)
	defer k.release()
	k.logger.Warn("dispatch: ordered send still running; its lane waits for it alone, held by a connection of its own, and the other lanes go on",
		slog.Duration("running_for", time.Since(h.started).Round(time.Millisecond)))
	// The destination is set aside while the send runs, as one that timed
	// out: its other rows wait, the other destinations flow, and operators
	// see the pause (console, relayer stats).
	g.aside.record(h.e, timedOut, fmt.Errorf("a send has been running for %s", time.Since(h.started).Round(time.Second)))

	st, held := k.hold()
	renew := time.NewTicker(g.opts.LeaseDuration / 3)
	defer renew.Stop()
	warn := time.NewTicker(stuckLogEvery)
	defer warn.Stop()
	for {
		select {
		case err := <-h.done:
			s.settleStraggler(k, st, held, err, &res)
			return
		case <-renew.C:
			if held {
				k.end("COMMIT") // the renewal becomes visible
			}
			st, held = k.hold()
		case <-warn.C:
			k.logger.Warn("dispatch: ordered send still running; its lane waits for it",
				slog.Duration("running_for", time.Since(h.started).Round(time.Second)))
		case <-g.killed.Done():
			if held {
				k.end("ROLLBACK")
			}
			k.logger.Warn("dispatch: ordered worker stopped with a send still running; its row will be sent again")
			return
		}
	}
}

// settleStraggler ends the keeper of h once the transport returned err: it
// records the outcome in the keeper's transaction when the keeper holds
// the lane (held), and leaves the row as it is otherwise (unknown).
func (s *groupLoop) settleStraggler(k *keeperHold, st *workerstore.Store, held bool, err error, res *laneDone) {
	h := k.h
	stopping := err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
	h.timer.end(outcomeOf(err, stopping), err)
	k.logger.Info("dispatch: ordered send handed off returned", slog.Duration("after", time.Since(h.started).Round(time.Millisecond)),
		slog.Any("error", err))
	if !held {
		return
	}
	if rerr := s.recordStraggler(st, h, err, stopping, res); rerr != nil {
		k.logger.Error("dispatch: ordered keeper could not record the send's outcome; its row will be sent again", slog.String("error", rerr.Error()))
		k.end("ROLLBACK")
		return
	}
	k.end("COMMIT")
	if res.progressed {
		h.member.stats.deleted.Add(1)
	}
}

// keeperHold is a keeper's hold on its lane: a transaction, on a
// connection of its own, that renews and locks the lane's lease.
type keeperHold struct {
	g      *laneGroup
	h      *straggler
	conn   *workerConn
	logger *slog.Logger
}

func newKeeperHold(g *laneGroup, h *straggler) *keeperHold {
	conn := newWorkerConn(g.db, g.store)
	conn.idleTx = g.opts.LeaseDuration/2 + idleTxMargin
	logger := g.opts.Logger.With(slog.String("worker", h.member.name), slog.Int("lane", h.lane),
		slog.String("transport", h.e.transport), slog.String("destination", h.e.destination), slog.String("id", h.msg.ID.String()))
	return &keeperHold{g: g, h: h, conn: conn, logger: logger}
}

// statement bounds one statement of the keeper's.
func (k *keeperHold) statement() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), k.g.opts.LeaseDuration/2)
}

// hold begins a transaction that renews and locks the lane's lease; it
// reports whether the lane is held.
func (k *keeperHold) hold() (*workerstore.Store, bool) {
	ctx, cancel := k.statement()
	defer cancel()
	st, err := k.conn.store(ctx)
	if err == nil {
		if err = k.conn.unchain(ctx); err == nil {
			err = k.conn.openBatch(ctx)
		}
	}
	var held []int
	if err == nil {
		held, err = st.AcquireLaneLeasesFor(ctx, []int{k.h.lane}, []string{k.h.member.name}, k.g.token, k.g.opts.LeaseDuration)
	}
	if err != nil {
		k.conn.broken()
		k.logger.Error("dispatch: ordered keeper cannot hold its lane; it tries again", slog.String("error", err.Error()))
		return nil, false
	}
	if len(held) == 0 {
		k.logger.Error("dispatch: ordered keeper lost its lane's lease; a copy of the running send may arrive after later messages of its key")
		_ = k.conn.endBatch(ctx, "ROLLBACK")
		return st, false
	}
	return st, true
}

// end ends the keeper's transaction with stmt.
func (k *keeperHold) end(stmt string) {
	ctx, cancel := k.statement()
	defer cancel()
	if err := k.conn.endBatch(ctx, stmt); err != nil {
		k.conn.broken()
		k.logger.Error("dispatch: ordered keeper", slog.String("error", err.Error()))
	}
}

// release gives the keeper's connection back.
func (k *keeperHold) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	k.conn.release(ctx)
}

// recordStraggler records, in the keeper's transaction, the outcome err of the
// send h: delete the row it sent, record a failure of its own, or, when
// the send ended because its context did (stopping), leave the row.
func (s *groupLoop) recordStraggler(st *workerstore.Store, h *straggler, err error, stopping bool, res *laneDone) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.g.opts.LeaseDuration/2)
	defer cancel()
	id := h.msg.ID
	switch {
	case err == nil:
		n, derr := st.DeleteLaneRows(ctx, []uuid.UUID{id}, s.g.token)
		if derr != nil {
			return derr
		}
		if n != 1 {
			return fmt.Errorf("deleted %d of 1 sent row", n)
		}
		h.member.stats.sent.Add(1)
		res.progressed, res.more = true, []int{h.lane}
		return nil
	case stopping, errors.Is(err, errStraggler), errors.Is(err, relayer.ErrUnavailable), store.OverLimit(&h.msg.Message) != nil:
		return nil
	}
	v := s.g.retries.judge(&h.msg.Message, h.msg.Attempts, err, s.g.clock.now())
	f := []store.Failure{{ID: id, Error: err.Error(), RetryAt: v.retryAt}}
	record := st.FailLaneRows
	if v.reason != "" {
		record = st.ParkLaneRows
	}
	n, ferr := record(ctx, f, s.g.token)
	if ferr == nil && n != 1 {
		ferr = fmt.Errorf("recorded %d of 1 failure", n)
	}
	if ferr == nil {
		h.member.stats.failed.Add(1)
		s.g.cursors.forget([]int{h.lane})
	}
	return ferr
}
