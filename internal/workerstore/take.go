package workerstore

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/internal/storesql"
	"github.com/relayer-go/relayer/store"
)

// Taking rows.
//
// A take deletes eligible unordered rows inside the caller's transaction and
// returns them. The transaction's row locks are the claim: concurrent takes and
// claims skip locked rows, so no two workers hold one row; the caller sends what
// it took, writes back with [Store.Restore] the rows it could not send, and
// commits. A crash or a rollback before the commit returns every row as it was,
// and a commit that fails after a send means the rows are sent again, which
// at-least-once delivery allows.
//
// One statement per batch and no second version of each row make a take about
// half the database work of a claim (an UPDATE) followed by a fenced DELETE.
// The price is a transaction open while the caller sends. It holds a
// transaction id, so for as long as the send lasts VACUUM cannot remove rows
// deleted anywhere in the database after it began: keep sends short and
// bounded (dispatch bounds them by its claim duration and sets the session's
// idle_in_transaction_session_timeout a little above it, so that the server
// ends a transaction whose worker stopped responding).
//
// After any failed statement or commit, roll back and discard the
// transaction: a COMMIT AND CHAIN in a transaction that already failed reports
// no error, and after a failed commit a *sql.Tx runs further statements
// outside any transaction.

// Taken is a row a take removed, without its content: its id and the
// failures recorded on it, which [Store.Restore] needs to write it back.
type Taken struct {
	ID        uuid.UUID
	Attempts  int
	LastError string
}

// TakeIDs deletes those of ids that are eligible at now (due, not parked, not
// held by a live claim), unordered, and not locked by another transaction, and
// returns them (id, attempts, last error) appended to dst[:0] in id order. The store must be bound to a
// transaction ([Store.With] on a *sql.Tx): the rows are gone only when it
// commits. Otherwise (a *sql.DB, a *sql.Conn, any other store.DBTX, or an unbound
// store) it returns [ErrNeedsTransaction] and deletes nothing.
func (s *Store) TakeIDs(ctx context.Context, dst []Taken, ids []uuid.UUID, now time.Time) ([]Taken, error) {
	dst = dst[:0]
	if _, ok := s.db.(*sql.Tx); !ok {
		return dst, fmt.Errorf("%w: take by id", ErrNeedsTransaction)
	}
	if len(ids) == 0 {
		return dst, nil
	}
	rows, err := s.db.QueryContext(ctx, s.q.takeIDs, storesql.UUIDArray(ids), storesql.PgTime(now))
	if err != nil {
		return dst, storesql.Wrap(ctx, "take by id", err)
	}
	defer rows.Close()
	for rows.Next() {
		var t Taken
		var lastErr sql.NullString
		if err := rows.Scan(&t.ID, &t.Attempts, &lastErr); err != nil {
			return dst[:0], storesql.Wrap(ctx, "take by id", err)
		}
		t.LastError = lastErr.String
		dst = append(dst, t)
	}
	if err := rows.Err(); err != nil {
		return dst[:0], storesql.Wrap(ctx, "take by id", err)
	}
	sortTaken(dst)
	return dst, nil
}

// Endpoint is a (transport, destination) pair.
type Endpoint struct {
	Transport   string
	Destination string
}

// TakeNextUnordered deletes, in one statement, up to limit eligible unordered
// rows with ids after the cursor, in id order, skipping rows locked by other
// transactions, and returns them appended to dst[:0] in id order. Rows created
// after createdBefore are left alone unless they were scheduled for later than
// their creation: those are the rows direct dispatch is still expected to
// send. A zero createdBefore means now. The rows of the endpoints in skip
// stay in the table untouched: a worker skips destinations it knows to be
// slow or down instead of taking their rows only to write them back. Like
// [Store.TakeIDs] it needs a store bound to a transaction.
func (s *Store) TakeNextUnordered(ctx context.Context, dst []store.Row, after uuid.UUID, limit int, now, createdBefore time.Time, skip []Endpoint) ([]store.Row, error) {
	if err := s.checkTake("take next", limit); err != nil {
		return dst[:0], err
	}
	now = storesql.PgTime(now)
	if createdBefore.IsZero() {
		createdBefore = now
	}
	var skipT, skipD storesql.ArrayLiteral
	for _, e := range skip {
		skipT.Text(e.Transport, false)
		skipD.Text(e.Destination, false)
	}
	return s.takeRows(ctx, "take next", dst, s.q.takeNext, after, limit, now, storesql.PgTime(createdBefore), skipT.String(), skipD.String())
}

// TakeNextUnorderedTo deletes, in one statement, up to limit eligible
// unordered rows of endpoint e, of any age, in id order, skipping rows locked
// by other transactions, and returns them in id order appended to dst[:0].
// It is how a worker takes the row it probes a paused destination with. Like
// [Store.TakeIDs] it needs a store bound to a transaction.
func (s *Store) TakeNextUnorderedTo(ctx context.Context, dst []store.Row, e Endpoint, limit int, now time.Time) ([]store.Row, error) {
	const op = "take next to endpoint"
	if err := s.checkTake(op, limit); err != nil {
		return dst[:0], err
	}
	return s.takeRows(ctx, op, dst, s.q.takeNextTo, e.Transport, e.Destination, limit, storesql.PgTime(now))
}

// checkTake refuses a take of op on a store not bound to a transaction, or
// with a limit that is not positive.
func (s *Store) checkTake(op string, limit int) error {
	if _, ok := s.db.(*sql.Tx); !ok {
		return fmt.Errorf("%w: %s", ErrNeedsTransaction, op)
	}
	if limit <= 0 {
		return fmt.Errorf("%w: limit must be positive, got %d", store.ErrInvalidArgument, limit)
	}
	return nil
}

// takeRows runs a take's query and returns the rows it deleted, corrupt ones
// marked, appended to dst[:0] in id order.
func (s *Store) takeRows(ctx context.Context, op string, dst []store.Row, query string, args ...any) ([]store.Row, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return dst[:0], storesql.Wrap(ctx, op, err)
	}
	defer rows.Close()
	dst = dst[:0]
	sc := storesql.Scratch{FreshBytes: s.freshBytes}
	for rows.Next() {
		dst = append(dst, store.Row{})
		if err := scanKeepingCorrupt(&sc, rows, &dst[len(dst)-1]); err != nil {
			return dst[:0], storesql.Wrap(ctx, op, err)
		}
	}
	if err := rows.Err(); err != nil {
		// An interrupted read must never look like a short backlog.
		return dst[:0], storesql.Wrap(ctx, op, err)
	}
	// RETURNING follows no order, and callers send in id order.
	slices.SortFunc(dst, func(a, b store.Row) int { return bytes.Compare(a.ID[:], b.ID[:]) })
	return dst, nil
}

// Restore writes rows back in one statement, exactly as given: content,
// Attempts, LastError (made storable) and RetryAt, unclaimed and not parked. It is how
// a worker records the rows it took but did not send (with Attempts raised and
// LastError set for a failed send, unchanged for a send it never started)
// before committing the take.
//
// Unlike [Store.Insert] it does not validate the content: the rows come from
// the table, possibly written by another writer, and a take whose write-back
// failed would roll back and send its other rows again on every pass. The
// table's own constraints still apply; a row that breaks one (an id still in
// the table, an ordered row without a key) fails the statement, which writes
// nothing.
func (s *Store) Restore(ctx context.Context, rows []store.Row) error {
	if len(rows) == 0 {
		return nil
	}
	args, err := writeBackArgs(rows, func(i int, a *storesql.ArrayLiteral) { a.Time(rows[i].RetryAt, rows[i].RetryAt.IsZero()) })
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, s.q.restore, args...)
	return storesql.Wrap(ctx, "restore", err)
}

// writeBackArgs returns the parameters of a statement that writes taken rows
// back as they are (Restore, Bury): the stored columns, with the stored header
// bytes of a corrupt row; attempts; last error; and one more column, whose
// element i last appends.
func writeBackArgs(rows []store.Row, last func(i int, a *storesql.ArrayLiteral)) ([]any, error) {
	var cols storesql.Columns
	var attempts, errs, extra storesql.ArrayLiteral
	for i := range rows {
		r := &rows[i]
		if err := cols.AddRaw(&r.Message, r.CreatedAt, storedHeaders(r)); err != nil {
			return nil, fmt.Errorf("%w: row %d (id %s): headers: %w", store.ErrInvalidMessage, i, r.ID, err)
		}
		attempts.Int(r.Attempts, false)
		errs.Text(storesql.CleanText(r.LastError), r.LastError == "")
		last(i, &extra)
	}
	return append(cols.Args(), attempts.String(), errs.String(), extra.String()), nil
}

// Bury writes rows to the dead letters, with reasons[i] the reason of
// rows[i], keeping their ids, content, attempts and last error; they are
// stamped with the database's time. It is how a take ends rows it removed
// from the outbox (in the same transaction, so that a row is in exactly one
// of the two tables). A dead letter with the same id is replaced. Like
// [Store.Restore] it writes stored header bytes back as they are.
func (s *Store) Bury(ctx context.Context, rows []store.Row, reasons []string) error {
	if len(rows) != len(reasons) {
		return fmt.Errorf("%w: %d rows and %d reasons", store.ErrInvalidArgument, len(rows), len(reasons))
	}
	if len(rows) == 0 {
		return nil
	}
	args, err := writeBackArgs(rows, func(i int, a *storesql.ArrayLiteral) { a.Text(storesql.CleanText(reasons[i]), false) })
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, s.q.bury, args...)
	return storesql.Wrap(ctx, "bury", err)
}

func sortTaken(ts []Taken) {
	slices.SortFunc(ts, func(a, b Taken) int { return bytes.Compare(a.ID[:], b.ID[:]) })
}
