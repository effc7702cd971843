package store

import (
	"context"
	"database/sql"
	"fmt"
)

// Worker sessions.
//
// Drivers that cache prepared statements (pgx does) let PostgreSQL switch a
// statement to a generic plan after five executions, and keep that plan until
// the table is analyzed again. A generic plan made while the outbox was empty
// scans the whole table, and a queue table is often empty; every batch then
// reads every live and dead tuple. Custom plans are remade for each execution
// from the table's current size, so workers run their statements on pinned
// connections that force them.
//
// Workers' own commits need not be durable either: a claim or a delete lost in a
// crash only makes a message be sent again, which at-least-once delivery allows.
// Business transactions never run on these connections.

const (
	tuneSQL = `SELECT set_config('plan_cache_mode', 'force_custom_plan', false), set_config('synchronous_commit', 'off', false)`
)

// TuneWorkerConn applies the settings Relayer's workers run with to a pinned
// connection: custom plans for every statement (plan_cache_mode =
// force_custom_plan) and asynchronous commit (synchronous_commit = off). Call
// [UntuneWorkerConn] before closing the connection, which returns it to the pool.
func TuneWorkerConn(ctx context.Context, conn *sql.Conn) error {
	if conn == nil {
		return ErrNilDB
	}
	if _, err := conn.ExecContext(ctx, tuneSQL); err != nil {
		return wrap(ctx, "tune worker connection", err)
	}
	return nil
}

// UntuneWorkerConn restores the settings [TuneWorkerConn] changed to the
// session's defaults, so that the connection can serve other users of the pool.
// It also resets idle_in_transaction_session_timeout, which workers that hold a
// transaction across a send set to end it on the server if they stop responding.
func UntuneWorkerConn(ctx context.Context, conn *sql.Conn) error {
	if conn == nil {
		return ErrNilDB
	}
	for _, setting := range []string{"plan_cache_mode", "synchronous_commit", "idle_in_transaction_session_timeout"} {
		if _, err := conn.ExecContext(ctx, "RESET "+setting); err != nil {
			return wrap(ctx, fmt.Sprintf("reset %s", setting), err)
		}
	}
	return nil
}
