package dispatch

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/internal/workerstore"
)

// workerConn is the connection one worker goroutine runs its statements on,
// pinned from the application's pool and tuned with workerstore.TuneWorkerConn:
// custom plans (a generic plan frozen while the outbox was empty would scan the
// whole table) and asynchronous commit (a lost claim or delete only causes a
// resend). It is not safe for concurrent use.
type workerConn struct {
	db   *sql.DB
	base *workerstore.Store
	conn *sql.Conn
	st   *workerstore.Store
	// idleTx, when positive, is the session's
	// idle_in_transaction_session_timeout: workers that keep a transaction open
	// across a send set it a little above their send deadline, so that the
	// server rolls back the transaction of a worker that stopped responding and
	// its rows can be taken again.
	idleTx time.Duration
	// generic selects generic plans with sequential scans off (see
	// workerstore.TuneTakingConn), for sessions that run only takes or ordered
	// batches and probes.
	generic bool
	// chainedAt is set while the pinned connection is in a transaction that
	// an ordered batch's COMMIT AND CHAIN or ROLLBACK AND CHAIN began (see
	// openBatch) and no statement has run in yet: when it began. Such a
	// transaction holds no snapshot and no transaction id, and keeps nothing
	// from vacuum.
	chainedAt time.Time
	// txFrom is when the worker sent the statement that began the open
	// batch's transaction (its BEGIN, or the previous batch's COMMIT AND
	// CHAIN): the transaction's now() on the database is no earlier.
	txFrom time.Time
}

func newWorkerConn(db *sql.DB, base *workerstore.Store) *workerConn {
	return &workerConn{db: db, base: base}
}

// newTakingConn is a worker connection for takes held across sends of at most
// sendFor (see workerstore.Store.TakeIDs).
func newTakingConn(db *sql.DB, base *workerstore.Store, sendFor time.Duration) *workerConn {
	return &workerConn{db: db, base: base, idleTx: sendFor + idleTxMargin, generic: genericTakePlans}
}

// genericTakePlans selects generic plans for taking connections and ordered
// batch connections (see workerstore.TuneTakingConn); benchmarks turn it off to
// compare.
var genericTakePlans = true

// idleTxMargin is how long past its send deadline a worker's transaction may
// stay idle before the server ends it: room to record the outcome and commit.
const idleTxMargin = 5 * time.Second

// store returns the store bound to the pinned connection, pinning one first.
func (w *workerConn) store(ctx context.Context) (*workerstore.Store, error) {
	if w.st != nil {
		return w.st, nil
	}
	conn, err := w.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	if err := workerstore.TuneWorkerConn(ctx, conn); err != nil {
		discard(conn)
		return nil, err
	}
	if w.idleTx > 0 {
		if err := workerstore.TuneTakingConn(ctx, conn, w.idleTx, w.generic); err != nil {
			discard(conn)
			return nil, err
		}
	}
	st, err := w.base.With(conn)
	if err != nil {
		discard(conn)
		return nil, err
	}
	w.conn, w.st = conn, st
	return st, nil
}

// begin starts a transaction on the pinned connection and returns it with the
// store bound to it.
func (w *workerConn) begin(ctx context.Context) (*sql.Tx, *workerstore.Store, error) {
	if _, err := w.store(ctx); err != nil {
		return nil, nil, err
	}
	tx, err := w.conn.BeginTx(ctx, nil)
	if err != nil {
		return nil, nil, err
	}
	st, err := w.base.With(tx)
	if err != nil {
		tx.Rollback()
		return nil, nil, err
	}
	return tx, st, nil
}

// openBatch opens an ordered batch's transaction on the pinned connection:
// the one the previous batch chained, or a new one. The connection must be
// pinned (see store).
func (w *workerConn) openBatch(ctx context.Context) error {
	if w.chained() {
		w.chainedAt = time.Time{}
		return nil
	}
	w.txFrom = time.Now()
	_, err := w.conn.ExecContext(ctx, "BEGIN")
	return err
}

// endBatch ends an ordered batch's transaction with end, "COMMIT" or
// "ROLLBACK", and chains the next batch's: one round trip fewer per batch
// while batches follow one another. A failed end leaves nothing chained; the
// caller drops the connection.
func (w *workerConn) endBatch(ctx context.Context, end string) error {
	return w.chain(func() error {
		_, err := w.conn.ExecContext(ctx, end+" AND CHAIN")
		return err
	})
}

// commitDeletes ends an ordered batch's transaction as endBatch does with
// "COMMIT", deleting the rows ids read under the lanes' leases (held with
// token) on the way: all of them, or nothing is committed and it fails (see
// workerstore.Store.CommitLaneDeletes).
func (w *workerConn) commitDeletes(ctx context.Context, ids []uuid.UUID, token uuid.UUID) error {
	return w.chain(func() error { return w.st.CommitLaneDeletes(ctx, ids, token, true) })
}

// chain runs end, which ends the open batch's transaction and chains the
// next one's, and records when.
func (w *workerConn) chain(end func() error) error {
	w.txFrom = time.Now()
	if err := end(); err != nil {
		return err
	}
	w.chainedAt = time.Now()
	return nil
}

// chained reports whether a chained transaction is open (see endBatch).
func (w *workerConn) chained() bool { return !w.chainedAt.IsZero() }

// unchain ends the chained transaction, if one is open, before the
// connection runs anything else than a batch, or waits unused: it has run no
// statement, so rolling it back undoes nothing. A failure drops the
// connection.
func (w *workerConn) unchain(ctx context.Context) error {
	if !w.chained() {
		return nil
	}
	w.chainedAt = time.Time{}
	if _, err := w.conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		w.broken()
		return err
	}
	return nil
}

// broken drops the pinned connection after a statement failed. Its session
// state is unknown (and it may be dead), so it is closed rather than returned
// to the pool with the worker settings on it.
func (w *workerConn) broken() {
	if w.conn != nil {
		discard(w.conn)
		w.conn, w.st = nil, nil
	}
	w.chainedAt = time.Time{}
}

// release returns the connection to the pool with its settings reset.
func (w *workerConn) release(ctx context.Context) {
	if w.conn == nil {
		return
	}
	if err := w.unchain(ctx); err != nil {
		return // dropped
	}
	if err := workerstore.UntuneWorkerConn(ctx, w.conn); err != nil {
		discard(w.conn)
	} else {
		w.conn.Close()
	}
	w.conn, w.st = nil, nil
}

// discard closes conn's driver connection instead of returning it to the pool:
// database/sql drops a connection whose Raw callback reports ErrBadConn.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}
