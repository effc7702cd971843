package dispatch

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/relayer-go/relayer/store"
)

// The wake-up listener's reconnection back-off. Its cap is short: a try is
// one connection attempt, which a database that is down refuses at once, and
// the listener is back within a couple of seconds of the database's return.
const (
	listenRetryMin = 500 * time.Millisecond
	listenRetryMax = 2 * time.Second
)

// NotificationWaiter waits for PostgreSQL notifications on the connections
// of one database/sql driver, for RunnerOptions.Listen. Package
// dispatch/pgxlisten provides the one for pgx's driver, so that dispatch
// itself depends on none.
type NotificationWaiter interface {
	// Check returns an error when db's driver is not one the waiter can
	// wait on. NewRunner calls it.
	Check(db *sql.DB) error
	// Wait runs statement (a LISTEN) on driverConn, the driver's
	// connection as sql.Conn.Raw hands it out, calls listening once the
	// LISTEN is in force, then notified for each notification, until ctx
	// ends or the connection fails, and returns the error that ended it.
	// It closes the connection before returning: it must never go back to
	// the pool subscribed.
	Wait(ctx context.Context, driverConn any, statement string, listening, notified func()) error
}

// PayloadWaiter is a NotificationWaiter that hands each notification's
// payload to the listener: writers send the lowest id of the unordered
// rows their commits wrote, from which recovery then takes again, so that
// a row whose transaction committed after later ids were taken waits for
// no poll. pgxlisten.Waiter is one. With a waiter that is not, such rows
// wait for recovery's next pass from the beginning (up to
// RecoveryOptions.PollInterval).
type PayloadWaiter interface {
	NotificationWaiter
	// WaitPayload is Wait, calling notified with each notification's
	// payload.
	WaitPayload(ctx context.Context, driverConn any, statement string, listening func(), notified func(payload string)) error
}

// listener holds one connection that LISTENs on the outbox's wake-up
// channel and calls wake for each notification, and once each time it
// starts listening (rows may have committed while it did not). When the
// connection fails it reconnects after a back-off; meanwhile the workers
// poll as they always do.
type listener struct {
	db        *sql.DB
	waiter    NotificationWaiter
	listenSQL string
	// wake wakes the workers for a notification with payload ("" for
	// none, and when the listener starts listening).
	wake   func(payload string)
	logger *slog.Logger
	loop   loop
	// listening is set while the LISTEN is in force; received counts
	// notifications.
	listening atomic.Bool
	received  atomic.Uint64
}

func newListener(db *sql.DB, waiter NotificationWaiter, opts store.Tables, wake func(payload string), logger *slog.Logger) (*listener, error) {
	if waiter == nil {
		return nil, fmt.Errorf("%w: RunnerOptions.Listen needs RunnerOptions.Notifications, the way to wait for notifications on the pool's driver (pgxlisten.Waiter{} for pgx's)", ErrInvalidOptions)
	}
	if err := waiter.Check(db); err != nil {
		return nil, fmt.Errorf("%w: RunnerOptions.Notifications: %w", ErrInvalidOptions, err)
	}
	return &listener{db: db, waiter: waiter, listenSQL: opts.ListenSQL(), wake: wake, logger: logger, loop: newLoop(false)}, nil
}

func (l *listener) Start(ctx context.Context) error {
	return l.loop.start(ctx, "wake-up listener", l.run)
}
func (l *listener) Stop(ctx context.Context) error { return l.loop.stop(ctx) }

func (l *listener) run(ctx context.Context) {
	retry := listenRetryMin
	failing := false
	for ctx.Err() == nil {
		listened, err := l.listen(ctx, failing)
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
// connection fails or ctx ends; again says that an earlier try failed, so
// that the return is logged. The connection is closed afterwards, never
// returned to the pool still subscribed.
func (l *listener) listen(ctx context.Context, again bool) (listened bool, err error) {
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	listening := func() {
		listened = true
		l.listening.Store(true)
		if again {
			l.logger.Info("dispatch: wake-up listener subscribed again")
		} else {
			l.logger.Debug("dispatch: wake-up listener listening", slog.String("statement", l.listenSQL))
		}
		l.wake("")
	}
	notified := func(payload string) {
		l.received.Add(1)
		l.wake(payload)
	}
	err = conn.Raw(func(dc any) error {
		if pw, ok := l.waiter.(PayloadWaiter); ok {
			return pw.WaitPayload(ctx, dc, l.listenSQL, listening, notified)
		}
		return l.waiter.Wait(ctx, dc, l.listenSQL, listening, func() { notified("") })
	})
	return listened, err
}

// pinned is how many connections the listener pins: its own.
func (l *listener) pinned() int { return 1 }

// isListening reports whether the LISTEN is in force.
func (l *listener) isListening() bool { return l.listening.Load() }

// receivedCount returns how many wake-ups the listener has received.
func (l *listener) receivedCount() uint64 { return l.received.Load() }
