package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/internal/storesql"
)

// DBTX is what the store runs its statements on: a *sql.DB, a *sql.Tx or a
// *sql.Conn. Statements on a *sql.Tx take part in that transaction.
type DBTX interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Store reads and changes the rows of one outbox. It is safe for concurrent use
// when its DBTX is (a *sql.DB is; a *sql.Tx is not). All SQL is built once, in
// [New], from validated identifiers.
type Store struct {
	db   DBTX
	opts Tables
	q    *queries
	sq   *statsQueries
	rdq  *redriveQueries
	pq   *pauseQueries
	oq   *overviewQueries
	vq   *versionQueries
	lq   *laneCountQueries
	aq   *activityQueries

	// freshBytes is set when db's driver hands out the bytes of every row in
	// memory of their own (see storesql.FreshBytes): rows then keep a large
	// body as the driver returned it instead of copying it.
	freshBytes bool
}

// New returns a store for the outbox whose tables are tables, running statements on db.
// It validates tables and does not touch the database: create them first
// with [Migrate] or [SchemaSQL]. The store does not take ownership of db.
func New(db DBTX, tables Tables) (*Store, error) {
	if isNil(db) {
		return nil, ErrNilDB
	}
	if err := tables.Validate(); err != nil {
		return nil, err
	}
	return newStore(db, tables.withDefaults()), nil
}

func newStore(db DBTX, opts Tables) *Store {
	n := newNames(opts)
	return &Store{db: db, opts: opts, q: buildQueries(n), sq: buildStatsQueries(n), rdq: buildRedriveQueries(n), pq: buildPauseQueries(n),
		oq: buildOverviewQueries(n), vq: buildVersionQueries(n), lq: buildLaneCountQueries(n), aq: buildActivityQueries(n), freshBytes: storesql.FreshBytes(db)}
}

// unbound returns a store with no database handle of its own, for writers
// that only run statements inside their callers' transactions
// (internal/storewrite). Its own methods return [ErrNilDB].
func unbound(opts Tables) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return newStore(unboundDB{}, opts.withDefaults()), nil
}

type unboundDB struct{}

func (unboundDB) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	return nil, ErrNilDB
}

func (unboundDB) QueryContext(context.Context, string, ...any) (*sql.Rows, error) {
	return nil, ErrNilDB
}

// With returns a store for the same outbox that runs its statements on db, for
// example inside the caller's transaction. It shares the prepared SQL text.
func (s *Store) With(db DBTX) (*Store, error) {
	if isNil(db) {
		return nil, ErrNilDB
	}
	fresh := s.freshBytes
	if _, ok := db.(*sql.DB); ok {
		fresh = storesql.FreshBytes(db)
	}
	// A transaction or connection does not name its driver: it is taken to
	// come from the store's own database, as the workers' do.
	return &Store{db: db, opts: s.opts, q: s.q, sq: s.sq, rdq: s.rdq, pq: s.pq, oq: s.oq, vq: s.vq, lq: s.lq, aq: s.aq, freshBytes: fresh}, nil
}

// Tables returns the store's options with defaults applied.
func (s *Store) Tables() Tables { return s.opts }

func isNil(db DBTX) bool { return storesql.IsNil(db) }

// Row is a stored message with its delivery bookkeeping.
type Row struct {
	relayer.Message
	// Attempts counts failed deliveries recorded by [Store.Fail].
	Attempts int
	// ClaimedUntil is the expiry of the row's claim when it was read, or zero.
	ClaimedUntil time.Time
	// LastError is the error of the last failed delivery, or "".
	LastError string
	// RetryAt is, for a row whose send failed, when it may be sent again (on
	// the database's clock); zero for a row that never failed. A worker that
	// writes a taken row back keeps it.
	RetryAt time.Time
	// Corrupt is set, by the reads of dead letters and parked keys and by
	// the workers' takes and lane reads, on a row whose stored headers could
	// not be decoded (an error matching [ErrCorruptRow], with a *[RowError]
	// in its chain): its Headers are nil. Other reads fail instead.
	Corrupt error
}

// ReadOptions bound a read.
type ReadOptions struct {
	// Now is the instant that decides eligibility: rows whose delivery time is at
	// or before it and whose claim expired at or before it are returned. Zero means
	// time.Now(). It is truncated to PostgreSQL's microsecond precision.
	Now time.Time
	// After is an exclusive cursor: only rows with a greater id are returned. The
	// zero UUID starts at the beginning.
	After uuid.UUID
	// Limit is the largest number of rows returned; it must be positive.
	Limit int
}

// ReadLane appends to dst[:0] the eligible rows of one ordered lane in ascending
// id order and returns the extended slice. Eligible rows are not parked, due, and
// unclaimed or with an expired claim. Body and header bytes are returned as
// stored. A row whose headers cannot be decoded fails the read with a *[RowError].
func (s *Store) ReadLane(ctx context.Context, dst []Row, lane int, opts ReadOptions) ([]Row, error) {
	if lane < 0 || lane >= relayer.LanesMax {
		return dst[:0], fmt.Errorf("%w: lane %d is outside 0 to %d", ErrInvalidArgument, lane, relayer.LanesMax-1)
	}
	if opts.Limit <= 0 {
		return dst[:0], fmt.Errorf("%w: Limit must be positive, got %d", ErrInvalidArgument, opts.Limit)
	}
	rows, err := s.db.QueryContext(ctx, s.q.readLane, lane, opts.After, pgTime(opts.Now), opts.Limit)
	if err != nil {
		return dst[:0], wrap(ctx, "read lane", err)
	}
	return s.scanRows(ctx, "read lane", rows, dst[:0])
}

// ReadUnordered is [Store.ReadLane] for the rows without a lane.
func (s *Store) ReadUnordered(ctx context.Context, dst []Row, opts ReadOptions) ([]Row, error) {
	if opts.Limit <= 0 {
		return dst[:0], fmt.Errorf("%w: Limit must be positive, got %d", ErrInvalidArgument, opts.Limit)
	}
	rows, err := s.db.QueryContext(ctx, s.q.readUnordered, opts.After, pgTime(opts.Now), opts.Limit)
	if err != nil {
		return dst[:0], wrap(ctx, "read unordered", err)
	}
	return s.scanRows(ctx, "read unordered", rows, dst[:0])
}

// CountEligible counts the rows that a read at now could return, across every
// lane and the unordered rows. Dead letters are not counted.
func (s *Store) CountEligible(ctx context.Context, now time.Time) (int64, error) {
	return s.count(ctx, "count eligible", s.q.countEligible, pgTime(now))
}

// CountDead counts the dead-letter rows.
func (s *Store) CountDead(ctx context.Context) (int64, error) {
	return s.count(ctx, "count dead", s.q.countDead)
}

func (s *Store) count(ctx context.Context, op, query string, args ...any) (int64, error) {
	return storesql.Count(ctx, s.db, op, query, args...)
}

// scanRows appends the rows of a result to dst; a row whose headers do not
// decode fails the read with a *RowError.
func (s *Store) scanRows(ctx context.Context, op string, rows *sql.Rows, dst []Row) ([]Row, error) {
	defer rows.Close()
	sc := storesql.Scratch{FreshBytes: s.freshBytes}
	for rows.Next() {
		dst = append(dst, Row{})
		if err := scanRow(&sc, rows, &dst[len(dst)-1]); err != nil {
			return dst[:0], wrap(ctx, op, err)
		}
	}
	if err := rows.Err(); err != nil {
		// An interrupted read must never look like a short backlog.
		return dst[:0], wrap(ctx, op, err)
	}
	return dst, nil
}

// rowFields are where a scan puts r's columns.
func rowFields(r *Row) storesql.Fields {
	return storesql.Fields{Message: &r.Message, Attempts: &r.Attempts, ClaimedUntil: &r.ClaimedUntil, LastError: &r.LastError, RetryAt: &r.RetryAt}
}

// scanRow reads the current row's storesql.RowColumns into r, and any
// columns after them into extra; a row whose headers do not decode fails
// with a *RowError.
func scanRow(sc *storesql.Scratch, rows storesql.Scanner, r *Row, extra ...any) error {
	bad, err := sc.Scan(rows, rowFields(r), extra...)
	if bad != nil {
		return &RowError{ID: r.ID, Column: "headers", Err: bad}
	}
	return err
}

// scanKeepingCorrupt is scanRow that marks a row whose headers do not
// decode Corrupt instead of failing: what an operator's read shows.
func scanKeepingCorrupt(sc *storesql.Scratch, rows storesql.Scanner, r *Row, extra ...any) error {
	bad, err := sc.Scan(rows, rowFields(r), extra...)
	if bad != nil {
		r.Corrupt = &RowError{ID: r.ID, Column: "headers", Err: bad}
	}
	return err
}

// pgTime is storesql.PgTime.
func pgTime(t time.Time) time.Time { return storesql.PgTime(t) }
