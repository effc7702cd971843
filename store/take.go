package store

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
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
// commits. Otherwise (a *sql.DB, a *sql.Conn, any other DBTX, or an unbound
// store) it returns [ErrNeedsTransaction] and deletes nothing.
func (s *Store) TakeIDs(ctx context.Context, dst []Taken, ids []uuid.UUID, now time.Time) ([]Taken, error) {
	dst = dst[:0]
	if _, ok := s.db.(*sql.Tx); !ok {
		return dst, fmt.Errorf("%w: take by id", ErrNeedsTransaction)
	}
	if len(ids) == 0 {
		return dst, nil
	}
	rows, err := s.db.QueryContext(ctx, s.q.takeIDs, uuidArray(ids), pgTime(now))
	if err != nil {
		return dst, wrap(ctx, "take by id", err)
	}
	defer rows.Close()
	for rows.Next() {
		var t Taken
		var lastErr sql.NullString
		if err := rows.Scan(&t.ID, &t.Attempts, &lastErr); err != nil {
			return dst[:0], wrap(ctx, "take by id", err)
		}
		t.LastError = lastErr.String
		dst = append(dst, t)
	}
	if err := rows.Err(); err != nil {
		return dst[:0], wrap(ctx, "take by id", err)
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
func (s *Store) TakeNextUnordered(ctx context.Context, dst []Row, after uuid.UUID, limit int, now, createdBefore time.Time, skip []Endpoint) ([]Row, error) {
	if err := s.checkTake("take next", limit); err != nil {
		return dst[:0], err
	}
	now = pgTime(now)
	if createdBefore.IsZero() {
		createdBefore = now
	}
	var skipT, skipD arrayLiteral
	for _, e := range skip {
		skipT.text(e.Transport, false)
		skipD.text(e.Destination, false)
	}
	return s.takeRows(ctx, "take next", dst, s.q.takeNext, after, limit, now, pgTime(createdBefore), skipT.String(), skipD.String())
}

// TakeNextUnorderedTo deletes, in one statement, up to limit eligible
// unordered rows of endpoint e, of any age, in id order, skipping rows locked
// by other transactions, and returns them in id order appended to dst[:0].
// It is how a worker takes the row it probes a paused destination with. Like
// [Store.TakeIDs] it needs a store bound to a transaction.
func (s *Store) TakeNextUnorderedTo(ctx context.Context, dst []Row, e Endpoint, limit int, now time.Time) ([]Row, error) {
	const op = "take next to endpoint"
	if err := s.checkTake(op, limit); err != nil {
		return dst[:0], err
	}
	return s.takeRows(ctx, op, dst, s.q.takeNextTo, e.Transport, e.Destination, limit, pgTime(now))
}

// checkTake refuses a take of op on a store not bound to a transaction, or
// with a limit that is not positive.
func (s *Store) checkTake(op string, limit int) error {
	if _, ok := s.db.(*sql.Tx); !ok {
		return fmt.Errorf("%w: %s", ErrNeedsTransaction, op)
	}
	if limit <= 0 {
		return fmt.Errorf("%w: limit must be positive, got %d", ErrInvalidArgument, limit)
	}
	return nil
}

// takeRows runs a take's query and returns the rows it deleted, corrupt ones
// marked, appended to dst[:0] in id order.
func (s *Store) takeRows(ctx context.Context, op string, dst []Row, query string, args ...any) ([]Row, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return dst[:0], wrap(ctx, op, err)
	}
	dst, err = s.scanRowsKeepingCorrupt(ctx, op, rows, dst[:0], true)
	if err != nil {
		return dst, err
	}
	sortByID(dst)
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
func (s *Store) Restore(ctx context.Context, rows []Row) error {
	if len(rows) == 0 {
		return nil
	}
	args, err := writeBackArgs(rows, func(i int, a *arrayLiteral) { a.time(rows[i].RetryAt, rows[i].RetryAt.IsZero()) })
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, s.q.restore, args...)
	return wrap(ctx, "restore", err)
}

// writeBackArgs returns the parameters of a statement that writes taken rows
// back as they are (Restore, Bury): the stored columns, with the stored header
// bytes of a corrupt row; attempts; last error; and one more column, whose
// element i last appends.
func writeBackArgs(rows []Row, last func(i int, a *arrayLiteral)) ([]any, error) {
	var cols columnArrays
	var attempts, errs, extra arrayLiteral
	for i := range rows {
		r := &rows[i]
		if err := cols.addRaw(&r.Message, r.CreatedAt, r.rawHeaders); err != nil {
			return nil, fmt.Errorf("%w: row %d (id %s): headers: %w", ErrInvalidMessage, i, r.ID, err)
		}
		attempts.int(r.Attempts, false)
		errs.text(cleanText(r.LastError), r.LastError == "")
		last(i, &extra)
	}
	return append(cols.args(), attempts.String(), errs.String(), extra.String()), nil
}

// Reasons a message leaves delivery for the dead letters.
const (
	// ReasonPermanent: the transport refused it for good
	// (relayer.ErrPermanent).
	ReasonPermanent = "permanent"
	// ReasonExhausted: it failed as many times as its retry policy allows.
	ReasonExhausted = "exhausted"
	// ReasonCorrupt: its stored headers do not decode, or it is ordered and
	// has no key, so it cannot be sent as it is; its bytes are kept
	// unchanged.
	ReasonCorrupt = "corrupt"
	// ReasonSkipped: an operator skipped it, the parked head of its key, to
	// release the key's later messages ([Store.SkipParkedHead]).
	ReasonSkipped = "skipped"
	// ReasonOverLimit: it failed, and its ordering key, transport name or
	// destination is longer than the outbox can index (see [OverLimit]), so
	// that its failure could not be recorded nor the row parked: written
	// before the limits were checked at publish, or by hand.
	ReasonOverLimit = "over_limit"
)

// Bury writes rows to the dead letters, with reasons[i] the reason of
// rows[i], keeping their ids, content, attempts and last error; they are
// stamped with the database's time. It is how a take ends rows it removed
// from the outbox (in the same transaction, so that a row is in exactly one
// of the two tables). A dead letter with the same id is replaced. Like
// [Store.Restore] it writes stored header bytes back as they are.
func (s *Store) Bury(ctx context.Context, rows []Row, reasons []string) error {
	if len(rows) != len(reasons) {
		return fmt.Errorf("%w: %d rows and %d reasons", ErrInvalidArgument, len(rows), len(reasons))
	}
	if len(rows) == 0 {
		return nil
	}
	args, err := writeBackArgs(rows, func(i int, a *arrayLiteral) { a.text(cleanText(reasons[i]), false) })
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, s.q.bury, args...)
	return wrap(ctx, "bury", err)
}

func sortTaken(ts []Taken) {
	slices.SortFunc(ts, func(a, b Taken) int { return bytes.Compare(a.ID[:], b.ID[:]) })
}
