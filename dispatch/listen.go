package dispatch

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/relayer-go/relayer/store"
)

// The wake-up listener's reconnection back-off.
const (
	listenRetryMin = time.Second
	listenRetryMax = 30 * time.Second
	listenCloseMax = 5 * time.Second
)

// errNotPgx is returned by NewRunner for RunnerOptions.Listen on a *sql.DB
// of another driver.
var errNotPgx = errors.New("RunnerOptions.Listen needs pgx's database/sql driver (github.com/jackc/pgx/v5/stdlib: sql.Open(\"pgx\", …) or stdlib.OpenDBFromPool), whose connections can wait for notifications")

// listener holds one connection that LISTENs on the outbox's wake-up
// channel and calls wake for each notification, and once each time it
// starts listening (rows may have committed while it did not). When the
// connection fails it reconnects after a back-off; meanwhile the workers
// poll as they always do.
type listener struct {
	db        *sql.DB
	listenSQL string
	wake      func()
	logger    *slog.Logger
	loop      loop
	// listening is set while the LISTEN is in force; received counts
	// notifications.
	listening atomic.Bool
	received  atomic.Uint64
}

func newListener(db *sql.DB, opts store.Options, wake func(), logger *slog.Logger) (*listener, error) {
	if _, ok := db.Driver().(*stdlib.Driver); !ok {
		return nil, fmt.Errorf("%w: %w, not %T", ErrInvalidOptions, errNotPgx, db.Driver())
	}
	return &listener{db: db, listenSQL: opts.ListenSQL(), wake: wake, logger: logger, loop: newLoop(false)}, nil
}

func (l *listener) Start(ctx context.Context) error {
	return l.loop.start(ctx, "wake-up listener", l.run)
}
func (l *listener) Stop(ctx context.Context) error { return l.loop.stop(ctx) }

func (l *listener) run(ctx context.Context) {
	retry := listenRetryMin
	failing := false
	for ctx.Err() == nil {
		listened, err := l.listen(ctx)
		l.listening.Store(false)
		if ctx.Err() != nil {
			return
		}
		if listened { // it had been listening: a new failure
			retry, failing = listenRetryMin, false
		}
		if !failing {
			l.logger.Warn("dispatch: wake-up listener lost its connection; workers poll until it is back",
				slog.String("error", err.Error()), slog.Duration("retry_in", retry))
			failing = true
		}
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		retry = min(2*retry, listenRetryMax)
	}
}

// listen takes a connection, LISTENs, and waits for notifications until the
// connection fails or ctx ends. The connection is closed afterwards, never
// returned to the pool still subscribed.
func (l *listener) listen(ctx context.Context) (listened bool, err error) {
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("dispatch: wake-up listener: connection of type %T: %w", dc, errNotPgx)
		}
		pc := sc.Conn()
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), listenCloseMax)
			defer cancel()
			pc.Close(cctx)
		}()
		if _, err := pc.Exec(ctx, l.listenSQL); err != nil {
			return err
		}
		listened = true
		l.listening.Store(true)
		l.logger.Debug("dispatch: wake-up listener listening", slog.String("statement", l.listenSQL))
		l.wake()
		for {
			if _, err := pc.WaitForNotification(ctx); err != nil {
				return err
			}
			l.received.Add(1)
			l.wake()
		}
	})
	return listened, err
}

// pinned is how many connections the listener pins: its own.
func (l *listener) pinned() int { return 1 }

// isListening reports whether the LISTEN is in force.
func (l *listener) isListening() bool { return l.listening.Load() }

// receivedCount returns how many wake-ups the listener has received.
func (l *listener) receivedCount() uint64 { return l.received.Load() }
