package enlist

import (
	"bytes"
	"context"
	"database/sql"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

// Wake-up interval defaults and limits (Options.WakeInterval).
const (
	WakeIntervalDefault = 5 * time.Millisecond
	WakeIntervalMin     = time.Millisecond
	WakeIntervalMax     = time.Second
	// wakeTimeout bounds one NOTIFY.
	wakeTimeout = 5 * time.Second
)

// Sender is implemented by a [CommitListener] that reports whether it sends
// the due unordered rows it takes itself, as direct dispatch does. A writer
// whose listener does not say so wakes the workers of other processes for
// every commit (see Options.Wake).
type Sender interface {
	SendsCommitted() bool
}

// notifier sends the outbox's payload-free NOTIFY, at most one per interval:
// the first request after a quiet interval is sent at once, on a goroutine
// of its own, and requests while a NOTIFY is sent or the interval runs share
// one NOTIFY at its end. No goroutine outlives a burst of requests by more
// than the interval.
type notifier struct {
	store    *workerstore.Store
	interval time.Duration
	logger   *slog.Logger

	mu    sync.Mutex
	busy  bool // a goroutine is sending or waiting out the interval
	dirty bool // requested since that goroutine's last NOTIFY
	// from is the lowest id of the unordered rows of the commits that
	// requested the next NOTIFY, its payload; the zero UUID for none.
	from    uuid.UUID
	failing bool // the last NOTIFY failed (logged once until one succeeds)
	sent    uint64
}

func newNotifier(db *sql.DB, opts store.Tables, interval time.Duration, logger *slog.Logger) (*notifier, error) {
	st, err := workerstore.New(db, opts)
	if err != nil {
		return nil, err
	}
	return &notifier{store: st, interval: interval, logger: logger}, nil
}

// request asks for a NOTIFY for a commit whose lowest unordered id is
// from (the zero UUID for none); it never blocks.
func (n *notifier) request(from uuid.UUID) {
	n.mu.Lock()
	if from != uuid.Nil && (n.from == uuid.Nil || bytes.Compare(from[:], n.from[:]) < 0) {
		n.from = from
	}
	if n.busy {
		n.dirty = true
		n.mu.Unlock()
		return
	}
	n.busy = true
	n.mu.Unlock()
	go n.send()
}

func (n *notifier) send() {
	for {
		n.mu.Lock()
		from := n.from
		n.from = uuid.Nil
		n.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), wakeTimeout)
		err := n.store.Notify(ctx, from)
		cancel()
		n.mu.Lock()
		if err != nil && from != uuid.Nil && (n.from == uuid.Nil || bytes.Compare(from[:], n.from[:]) < 0) {
			n.from = from // for the next NOTIFY
		}
		switch {
		case err == nil:
			n.sent++
			if n.failing {
				n.failing = false
				n.logger.Info("enlist: wake-up NOTIFY sent again")
			}
		case !n.failing:
			n.failing = true
			n.logger.Warn("enlist: wake-up NOTIFY failed; workers in other processes find the rows at their poll",
				slog.String("error", err.Error()))
		}
		n.mu.Unlock()
		time.Sleep(n.interval)
		n.mu.Lock()
		if !n.dirty {
			n.busy = false
			n.mu.Unlock()
			return
		}
		n.dirty = false
		n.mu.Unlock()
	}
}

// notified returns how many NOTIFYs succeeded.
func (n *notifier) notified() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.sent
}

// dueRows reports whether rows hold due ordered rows and due unordered
// ones, and the lowest id of the due unordered ones (the zero UUID when
// there is none); scheduled rows are found by a poll in time.
func dueRows(rows []relayer.Message) (ordered, unordered bool, from uuid.UUID) {
	now := time.Now()
	for i := range rows {
		if !rows[i].DeliverAt.IsZero() && rows[i].DeliverAt.After(now) {
			continue
		}
		if rows[i].Ordered {
			ordered = true
			continue
		}
		if id := rows[i].ID; !unordered || bytes.Compare(id[:], from[:]) < 0 {
			from = id
		}
		unordered = true
	}
	return ordered, unordered, from
}

// wakes reports whether a commit calls for waking the workers of other
// processes: it has a due ordered row (its lane may be leased anywhere), or
// a due unordered row that no sender of this process took.
func wakes(ordered, unordered bool, listener CommitListener, listenerErr error) bool {
	if ordered {
		return true
	}
	if !unordered {
		return false
	}
	if listener == nil || listenerErr != nil {
		return true
	}
	s, ok := listener.(Sender)
	return !ok || !s.SendsCommitted()
}
