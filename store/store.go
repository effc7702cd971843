package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
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
	opts Options
	q    *queries
	rq   *retentionQueries
	sq   *statsQueries
	rdq  *redriveQueries
	pq   *pauseQueries
	oq   *overviewQueries
	vq   *versionQueries
	lq   *laneCountQueries

	// freshBytes is set when db's driver hands out the bytes of every row in
	// memory of their own (see freshBytesDriver): rows then keep a large
	// body as the driver returned it instead of copying it.
	freshBytes bool
}

// New returns a store for the outbox named by opts, running statements on db.
// It validates opts and does not touch the database: create the tables first
// with [Migrate] or [SchemaSQL]. The store does not take ownership of db.
func New(db DBTX, opts Options) (*Store, error) {
	if isNil(db) {
		return nil, ErrNilDB
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return newStore(db, opts.withDefaults()), nil
}

func newStore(db DBTX, opts Options) *Store {
	n := newNames(opts)
	return &Store{db: db, opts: opts, q: buildQueries(n), rq: buildRetentionQueries(n), sq: buildStatsQueries(n), rdq: buildRedriveQueries(n), pq: buildPauseQueries(n),
		oq: buildOverviewQueries(n), vq: buildVersionQueries(n), lq: buildLaneCountQueries(n), freshBytes: freshBytesDriver(db)}
}

// freshBytesDrivers are the packages of the database/sql drivers known to
// return a []byte value for each column of each row in newly allocated
// memory, never in a buffer they reuse: pgx's stdlib decodes bytea into a
// new slice per row, in every version the module supports.
var freshBytesDrivers = []string{"github.com/jackc/pgx/v5/stdlib"}

// freshBytesDriver reports whether db is a *sql.DB whose driver is one of
// freshBytesDrivers. database/sql lets a driver reuse the memory of a []byte
// value once the next row is read, so with any other driver, a wrapped one
// included, the store copies what it keeps; with these it keeps a large
// body as the driver returned it, which saves the delivery of a body one of
// its copies.
func freshBytesDriver(db DBTX) (fresh bool) {
	d, ok := db.(*sql.DB)
	if !ok {
		return false
	}
	// A *sql.DB not made by sql.Open or sql.OpenDB has no driver, and
	// asking for it panics; New does not touch the database, so such a
	// handle fails only when it is used, as before.
	defer func() {
		if recover() != nil {
			fresh = false
		}
	}()
	t := reflect.TypeOf(d.Driver())
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t != nil && slices.Contains(freshBytesDrivers, t.PkgPath())
}

// Unbound returns a store with no database handle of its own, for writers that
// only run statements inside their callers' transactions, binding them with
// [Store.With]. The unbound store's own methods return [ErrNilDB].
func Unbound(opts Options) (*Store, error) {
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
		fresh = freshBytesDriver(db)
	}
	// A transaction or connection does not name its driver: it is taken to
	// come from the store's own database, as the workers' do.
	return &Store{db: db, opts: s.opts, q: s.q, rq: s.rq, sq: s.sq, rdq: s.rdq, pq: s.pq, oq: s.oq, vq: s.vq, lq: s.lq, freshBytes: fresh}, nil
}

// Options returns the store's options with defaults applied.
func (s *Store) Options() Options { return s.opts }

// CheckDBTX returns [ErrNilDB] when db is nil, a typed nil pointer
// included, and nil otherwise: what [Store.With] checks, for callers that
// run a store's statements through another function (see [Store.InsertWith]).
func CheckDBTX(db DBTX) error {
	if isNil(db) {
		return ErrNilDB
	}
	return nil
}

func isNil(db DBTX) bool {
	if db == nil {
		return true
	}
	v := reflect.ValueOf(db)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

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
	// the database's clock); zero for a row that never failed. [Store.Restore]
	// writes it back.
	RetryAt time.Time
	// Corrupt is set only by [Store.TakeNextUnordered] and
	// [Store.ReadLaneHeads], on a row whose stored headers could not be
	// decoded (a *[RowError] matching [ErrCorruptRow]): its Headers are nil,
	// and [Store.Restore] writes the stored bytes back unchanged. Other reads
	// fail instead.
	Corrupt error
	// rawHeaders holds a corrupt row's stored header bytes for Restore.
	rawHeaders []byte
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
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return 0, wrap(ctx, op, err)
	}
	defer rows.Close()
	var n int64
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return 0, wrap(ctx, op, err)
		}
		return 0, wrap(ctx, op, sql.ErrNoRows)
	}
	if err := rows.Scan(&n); err != nil {
		return 0, wrap(ctx, op, err)
	}
	return n, wrap(ctx, op, rows.Close())
}

// rowColumns is the column list every row-returning statement selects, in the
// order scanRow reads.
const rowColumns = `id, message_type, transport, destination, body, headers, ordering_key, lane,
    created_at, deliver_at, attempts, last_error, trace_parent, trace_state, claimed_until, retry_at`

func (s *Store) scanRows(ctx context.Context, op string, rows *sql.Rows, dst []Row) ([]Row, error) {
	return s.scanRowsKeepingCorrupt(ctx, op, rows, dst, false)
}

// scanRowsKeepingCorrupt is scanRows that, when keepCorrupt is set, returns a
// row whose headers do not decode marked Corrupt instead of failing: a take
// must return every row it deleted.
func (s *Store) scanRowsKeepingCorrupt(ctx context.Context, op string, rows *sql.Rows, dst []Row, keepCorrupt bool) ([]Row, error) {
	defer rows.Close()
	sc := rowScratch{freshBytes: s.freshBytes}
	for rows.Next() {
		dst = append(dst, Row{})
		r := &dst[len(dst)-1]
		var err error
		if keepCorrupt {
			err = sc.scanKeepingCorrupt(rows, r)
		} else {
			err = sc.scan(rows, r)
		}
		if err != nil {
			return dst[:0], wrap(ctx, op, err)
		}
	}
	if err := rows.Err(); err != nil {
		// An interrupted read must never look like a short backlog.
		return dst[:0], wrap(ctx, op, err)
	}
	return dst, nil
}

// rowScratch is what scanning a batch of rows reuses from row to row: the
// destinations of the nullable and raw columns (whose addresses, passed to
// Scan, would otherwise move to the heap for every row), the destination list,
// and an arena that holds the bodies of many rows in one allocation.
type rowScratch struct {
	rawBody, rawHeaders     sql.RawBytes
	key, lastErr            sql.NullString
	traceParent, traceSt    sql.NullString
	lane                    sql.NullInt32
	deliverAt, claimedUntil sql.NullTime
	retryAt                 sql.NullTime
	dest                    []any
	arena                   []byte
	// freshBytes: the driver's bytes are the row's own (Store.freshBytes),
	// so that keep need not copy a large body.
	freshBytes bool
	// lent: the rows are pgx's own, which can lend a row's body and headers
	// until the next row instead of copying them (keep copies them once).
	lent bool
}

// arenaChunk is the size of the blocks row bodies are copied into, and
// arenaFirst that of a read's first block, which doubles up to arenaChunk as
// the read goes on: most reads of a steady stream return a few rows, and a
// whole chunk for each, cleared before use, cost more than their rows.
const (
	arenaChunk = 64 << 10
	arenaFirst = 4 << 10
)

// keep copies b into the arena and returns the copy, its capacity clipped so
// that appending to it never overwrites the next row's bytes.
func (sc *rowScratch) keep(b []byte) []byte {
	if len(b) == 0 {
		return []byte{} // an empty body is a body, not a missing one
	}
	if len(b) > arenaChunk/4 {
		if sc.freshBytes {
			return b[:len(b):len(b)]
		}
		return bytes.Clone(b)
	}
	if cap(sc.arena)-len(sc.arena) < len(b) {
		sc.arena = make([]byte, 0, min(arenaChunk, max(arenaFirst, 2*cap(sc.arena), len(b))))
	}
	start := len(sc.arena)
	sc.arena = append(sc.arena, b...)
	return sc.arena[start:len(sc.arena):len(sc.arena)]
}

// rowScanner is the current row of a result: *sql.Rows, or pgx's rows where
// the store runs statements on pgx directly (see pipelined).
type rowScanner interface {
	Scan(dest ...any) error
}

// scanKeepingCorrupt is scan that returns a row whose headers do not decode
// marked Corrupt, with its stored header bytes kept for a write-back, instead
// of failing.
func (sc *rowScratch) scanKeepingCorrupt(rows rowScanner, r *Row, extra ...any) error {
	err := sc.scan(rows, r, extra...)
	var rowErr *RowError
	if errors.As(err, &rowErr) {
		r.Corrupt = err
		r.rawHeaders = sc.keep(sc.rawHeaders)
		return nil
	}
	return err
}

// scan reads the rowColumns of the current row into r, and any columns after
// them into extra.
func (sc *rowScratch) scan(rows rowScanner, r *Row, extra ...any) error {
	m := &r.Message
	var body, hdrs any = &sc.rawBody, &sc.rawHeaders
	if sc.lent {
		body, hdrs = (*pgtype.DriverBytes)(&sc.rawBody), (*pgtype.DriverBytes)(&sc.rawHeaders)
	}
	sc.dest = append(sc.dest[:0], &m.ID, &m.Type, &m.Transport, &m.Destination, body, hdrs,
		&sc.key, &sc.lane, &m.CreatedAt, &sc.deliverAt, &r.Attempts, &sc.lastErr, &sc.traceParent, &sc.traceSt, &sc.claimedUntil, &sc.retryAt)
	sc.dest = append(sc.dest, extra...)
	if err := rows.Scan(sc.dest...); err != nil {
		return err
	}
	m.Body = sc.keep(sc.rawBody)
	hs, err := headers.Decode(sc.rawHeaders, nil)
	if err != nil {
		sc.fill(r)
		return &RowError{ID: m.ID, Column: "headers", Err: err}
	}
	if len(hs) > 0 {
		// Decoded values alias their input, and raw bytes are only valid
		// until the next row: decode a copy that stays.
		if hs, err = headers.Decode(sc.keep(sc.rawHeaders), hs[:0]); err != nil {
			return &RowError{ID: m.ID, Column: "headers", Err: err}
		}
	}
	m.Headers = hs
	sc.fill(r)
	return nil
}

// fill sets r's fields from the scanned nullable columns.
func (sc *rowScratch) fill(r *Row) {
	m := &r.Message
	m.Key = sc.key.String
	m.Ordered = sc.lane.Valid
	m.Lane = int(sc.lane.Int32)
	m.CreatedAt = m.CreatedAt.UTC()
	m.DeliverAt = time.Time{}
	if sc.deliverAt.Valid {
		m.DeliverAt = sc.deliverAt.Time.UTC()
	}
	r.LastError = sc.lastErr.String
	r.ClaimedUntil = time.Time{}
	if sc.claimedUntil.Valid {
		r.ClaimedUntil = sc.claimedUntil.Time.UTC()
	}
	r.RetryAt = time.Time{}
	if sc.retryAt.Valid {
		r.RetryAt = sc.retryAt.Time.UTC()
	}
	m.TraceParent = sc.traceParent.String
	m.TraceState = sc.traceSt.String
}

// pgTime converts an instant to what PostgreSQL stores: UTC, microseconds. The
// drivers disagree on sub-microsecond input (one truncates, the server rounds
// text), so the store truncates before either sees it.
func pgTime(t time.Time) time.Time {
	if t.IsZero() {
		t = time.Now()
	}
	return t.UTC().Truncate(time.Microsecond)
}
