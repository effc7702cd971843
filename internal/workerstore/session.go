package workerstore

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"

	"github.com/relayer-go/relayer/internal/storesql"
	"github.com/relayer-go/relayer/store"
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
	tuneSQL = `SELECT set_config('plan_cache_mode', 'force_custom_plan', false), set_config('synchronous_commit', 'off', false),
    set_config('jit', 'off', false)`
)

// TuneWorkerConn applies the settings Relayer's workers run with to a pinned
// connection: custom plans for every statement (plan_cache_mode =
// force_custom_plan), asynchronous commit (synchronous_commit = off) and no
// JIT compilation (jit = off): a worker's statements touch a few hundred
// rows, and once an ANALYZE has seen a large backlog their estimates can
// pass jit_above_cost, when compiling a lane read cost about a second on
// every execution, against a few milliseconds to run it. Call
// [UntuneWorkerConn] before closing the connection, which returns it to the pool.
func TuneWorkerConn(ctx context.Context, conn *sql.Conn) error {
	if conn == nil {
		return store.ErrNilDB
	}
	if _, err := conn.ExecContext(ctx, tuneSQL); err != nil {
		return storesql.Wrap(ctx, "tune worker connection", err)
	}
	return nil
}

// UntuneWorkerConn restores the settings [TuneWorkerConn] changed to the
// session's defaults, so that the connection can serve other users of the pool.
// It also resets what [TuneTakingConn] sets.
func UntuneWorkerConn(ctx context.Context, conn *sql.Conn) error {
	if conn == nil {
		return store.ErrNilDB
	}
	for _, setting := range []string{"plan_cache_mode", "synchronous_commit", "jit", "idle_in_transaction_session_timeout", "enable_seqscan", "random_page_cost"} {
		if _, err := conn.ExecContext(ctx, "RESET "+setting); err != nil {
			return storesql.Wrap(ctx, fmt.Sprintf("reset %s", setting), err)
		}
	}
	return nil
}

// TuneTakingConn adds to [TuneWorkerConn] the settings of a session that takes
// rows ([Store.TakeIDs], [Store.TakeNextUnordered]) and holds the take's
// transaction across a send:
//
//   - idle_in_transaction_session_timeout = idleTx, so that the server ends the
//     transaction of a worker that stopped responding and its rows return;
//   - with generic, generic plans (plan_cache_mode = force_generic_plan) and
//     enable_seqscan = off. A take of a few rows spends about as long being
//     planned as being executed, and a direct dispatcher runs hundreds a
//     second; a cached generic plan skips the planning. With sequential scans
//     off, even a plan made while the outbox was empty reaches rows through an
//     index (TestTakingSessionsPlanWithIndexes checks both takes; the
//     write-back, [Store.Restore], is an INSERT). An ordered worker's batch
//     sessions are tuned the same way for the lane statements ([Store.ProbeLanes],
//     [Store.AcquireLaneLeases], [Store.LockLaneLeases], [Store.ReadLanes],
//     [Store.LockAndReadLanes], [Store.DeleteLaneRows], [Store.CommitLaneDeletes],
//     [Store.FailLaneRows], [Store.ParkLaneRows], [Store.Bury];
//     TestOrderedSessionsPlanWithIndexes), and random_page_cost = 1.1, as
//     for a table in memory or on SSD: at the default 4, a lane read on a
//     backlog whose lanes interleave in id order walked the primary key
//     (whose order is the table's) past every other lane's rows rather than
//     follow the lane index (TestOrderedReadsFollowTheLaneIndexOnABacklog).
//     Run nothing else on such a session.
func TuneTakingConn(ctx context.Context, conn *sql.Conn, idleTx time.Duration, generic bool) error {
	if conn == nil {
		return store.ErrNilDB
	}
	if idleTx < time.Millisecond {
		return fmt.Errorf("%w: idle transaction timeout %s is under 1ms", store.ErrInvalidArgument, idleTx)
	}
	ms := strconv.FormatInt(idleTx.Milliseconds(), 10)
	q := `SELECT set_config('idle_in_transaction_session_timeout', $1, false)`
	if generic {
		q += `, set_config('plan_cache_mode', 'force_generic_plan', false), set_config('enable_seqscan', 'off', false),
    set_config('random_page_cost', '1.1', false)`
	}
	if _, err := conn.ExecContext(ctx, q, ms); err != nil {
		return storesql.Wrap(ctx, "tune taking connection", err)
	}
	return nil
}
