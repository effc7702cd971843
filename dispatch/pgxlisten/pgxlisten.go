// Package pgxlisten lets a dispatch.Runner wait for wake-up notifications
// on connections of pgx's database/sql driver
// (github.com/jackc/pgx/v5/stdlib), so that the dispatch package itself
// links no driver:
//
//	runner, err := dispatch.NewRunner(db, outbox, dispatch.RunnerOptions{
//		Listen:        true,
//		Notifications: pgxlisten.Waiter{},
//	})
package pgxlisten

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
)

// ErrNotPgx reports a pool or connection of another driver than pgx's.
var ErrNotPgx = errors.New("pgxlisten: needs pgx's database/sql driver (github.com/jackc/pgx/v5/stdlib: sql.Open(\"pgx\", …) or stdlib.OpenDBFromPool), whose connections can wait for notifications")

// closeMax bounds the close of a connection that listened.
const closeMax = 5 * time.Second

// Waiter waits for notifications on pgx's connections. Its zero value is
// ready to use; it satisfies dispatch.NotificationWaiter.
type Waiter struct{}

// Check returns an error wrapping [ErrNotPgx] when db's driver is not
// pgx's.
func (Waiter) Check(db *sql.DB) error {
	if _, ok := db.Driver().(*stdlib.Driver); !ok {
		return fmt.Errorf("%w, not %T", ErrNotPgx, db.Driver())
	}
	return nil
}

// Wait runs statement (a LISTEN) on driverConn, the *stdlib.Conn that
// sql.Conn.Raw hands out, calls listening once it is in force, then
// notified for each notification, until ctx ends or the connection fails;
// it returns the error that ended it. It closes the connection before
// returning, so that it never goes back to the pool still subscribed.
func (w Waiter) Wait(ctx context.Context, driverConn any, statement string, listening, notified func()) error {
	return w.WaitPayload(ctx, driverConn, statement, listening, func(string) { notified() })
}

// WaitPayload is Wait, handing notified each notification's payload
// (dispatch.PayloadWaiter).
func (Waiter) WaitPayload(ctx context.Context, driverConn any, statement string, listening func(), notified func(payload string)) error {
	sc, ok := driverConn.(*stdlib.Conn)
	if !ok {
		return fmt.Errorf("connection of type %T: %w", driverConn, ErrNotPgx)
	}
	pc := sc.Conn()
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeMax)
		defer cancel()
		pc.Close(cctx)
	}()
	if _, err := pc.Exec(ctx, statement); err != nil {
		return err
	}
	listening()
	for {
		n, err := pc.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		notified(n.Payload)
	}
}
