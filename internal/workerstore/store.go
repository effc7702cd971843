// Package workerstore is the store's worker surface: the statements
// Relayer's own workers run on an outbox, shared by dispatch, enlist and the
// tests. It is the project's own and changes in any release; package store
// keeps the stable surface operators and integrators build on, which a
// [Store] carries too (it embeds a *store.Store). Package store's
// documentation describes the tables, a row's eligibility and the claim
// protocol these statements keep to.
//
// The workers build on two protocols:
//
//   - Takes, for unordered rows (direct dispatch and recovery): a transaction
//     deletes the rows it will send ([Store.TakeIDs] by id,
//     [Store.TakeNextUnordered] after a cursor, passing over set-aside
//     destinations, [Store.TakeNextUnorderedTo] one destination's, for a
//     probe), holds them locked while the broker is called, writes back
//     the rows it did not send with [Store.Restore], and commits. A crash or a
//     lost connection rolls the take back and every row is there again.
//   - Lanes, for ordered rows: a transaction takes or renews the leases of
//     the lanes it runs in one statement ([Store.AcquireLaneLeasesFor]; or,
//     for leases it renewed a moment ago, locks them without writing them,
//     [Store.LockLaneLeases]), reads
//     their heads ([Store.ReadLanes], each lane from its [LaneCursor], which
//     [LaneCursor.Advance] moves past what the transaction settled once it
//     commits; [NewLaneCursor] reads from the lane's start), sends the
//     admitted prefixes, and
//     settles them with [Store.DeleteLaneRows], [Store.FailLaneRows],
//     [Store.ParkLaneRows] and [Store.Bury] before committing. On a pinned
//     pgx connection the lock goes with the read, and a batch that only
//     deletes sends its delete with its commit, in one round trip each
//     ([Store.LockAndReadLanes], [Store.CommitLaneDeletes]). The locked
//     lease rows keep every other worker off the lanes' rows until then, so
//     the rows need no claim. [Store.ProbeLanes] finds
//     the lanes worth a batch, each read from its cursor too, and
//     [Store.Heartbeat] keeps the workers' membership.
//
// Besides these: singleton leases ([Store.AcquireLease], [Store.ReleaseLease],
// [Store.ReleaseLeases]), published pauses ([Store.PublishPauses],
// [Store.ClearPauses]), the workers' session settings ([TuneWorkerConn],
// [TuneTakingConn], [UntuneWorkerConn]), the server's clock
// ([Store.ServerTime]), wake-ups across processes ([Store.Notify]), the
// count of rows outside the workers' lanes ([Store.RowsBeyondLanes]) and
// the retention deletes ([Store.DeleteInboxBefore],
// [Store.DeleteDeadBefore]).
package workerstore

import (
	"context"
	"database/sql"
	"errors"

	"github.com/relayer-go/relayer/internal/storesql"
	"github.com/relayer-go/relayer/internal/tables"
	"github.com/relayer-go/relayer/store"
)

// ErrNeedsTransaction is returned by the takes ([Store.TakeIDs],
// [Store.TakeNextUnordered], [Store.TakeNextUnorderedTo]) on a store not
// bound to a *sql.Tx: outside a transaction their DELETE would commit before
// the rows were sent.
var ErrNeedsTransaction = errors.New("store: must run inside a transaction")

// Store runs the workers' statements on one outbox, and, through the
// *store.Store it embeds, the stable surface's. It is safe for concurrent
// use when its handle is (a *sql.DB is; a *sql.Tx is not).
type Store struct {
	*store.Store
	db store.DBTX
	q  *queries
	rq *retentionQueries
	pq *pauseQueries
	aq *activityQueries

	// freshBytes is set when db's driver hands out the bytes of every row in
	// memory of their own (see storesql.FreshBytes).
	freshBytes bool
}

// New returns a store for the outbox named by opts, running statements on
// db, as store.New does.
func New(db store.DBTX, opts store.Tables) (*Store, error) {
	base, err := store.New(db, opts)
	if err != nil {
		return nil, err
	}
	n := tables.Of(base.Tables().Schema, base.Tables().TablePrefix)
	return &Store{Store: base, db: db, q: buildQueries(n), rq: buildRetentionQueries(n), pq: buildPauseQueries(n),
		aq: buildActivityQueries(n), freshBytes: storesql.FreshBytes(db)}, nil
}

// With returns a store for the same outbox that runs its statements on db,
// as store.Store.With does.
func (s *Store) With(db store.DBTX) (*Store, error) {
	base, err := s.Store.With(db)
	if err != nil {
		return nil, err
	}
	fresh := s.freshBytes
	if _, ok := db.(*sql.DB); ok {
		fresh = storesql.FreshBytes(db)
	}
	// A transaction or connection does not name its driver: it is taken to
	// come from the store's own database, as the workers' do.
	return &Store{Store: base, db: db, q: s.q, rq: s.rq, pq: s.pq, aq: s.aq, freshBytes: fresh}, nil
}

// affected runs a statement that changes rows and returns how many.
func (s *Store) affected(ctx context.Context, op, query string, args ...any) (int64, error) {
	return storesql.Affected(ctx, s.db, op, query, args...)
}

// corruptRow is the Corrupt error of a row a worker read whose stored headers
// do not decode: the *store.RowError, with the stored bytes, which
// [Store.Restore] and [Store.Bury] write back unchanged.
type corruptRow struct {
	err *store.RowError
	raw []byte
}

func (c *corruptRow) Error() string { return c.err.Error() }

// Unwrap returns the *store.RowError, which matches store.ErrCorruptRow.
func (c *corruptRow) Unwrap() error { return c.err }

// storedHeaders returns the stored header bytes of a row the workers read
// with headers that do not decode, or nil.
func storedHeaders(r *store.Row) []byte {
	var c *corruptRow
	if errors.As(r.Corrupt, &c) {
		return c.raw
	}
	return nil
}

// rowFields are where a scan puts r's columns.
func rowFields(r *store.Row) storesql.Fields {
	return storesql.Fields{Message: &r.Message, Attempts: &r.Attempts, ClaimedUntil: &r.ClaimedUntil, LastError: &r.LastError, RetryAt: &r.RetryAt}
}

// scanKeepingCorrupt reads the current row's storesql.RowColumns into r,
// and any columns after them into extra; a row whose headers do not decode
// is returned marked Corrupt, its stored bytes kept for a write-back,
// instead of failing: a take must return every row it deleted, and one bad
// row must not stop a lane's other keys.
func scanKeepingCorrupt(sc *storesql.Scratch, rows storesql.Scanner, r *store.Row, extra ...any) error {
	bad, err := sc.Scan(rows, rowFields(r), extra...)
	if bad != nil {
		r.Corrupt = &corruptRow{err: &store.RowError{ID: r.ID, Column: "headers", Err: bad}, raw: sc.Keep(sc.RawHeaders())}
	}
	return err
}
