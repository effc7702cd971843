package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/internal/storesql"
)

// Redrive: what an operator does with the messages that left delivery. Dead
// letters are unordered messages refused for good, out of attempts, corrupt,
// or skipped; parked rows are ordered messages that failed the same way and
// hold their key. Every operation is one statement, so it is atomic,
// idempotent (a second run finds nothing left to do and reports 0), and safe
// while workers run: it locks the rows it changes, and the workers never read
// a dead letter or a parked row.

// DeadFilter selects dead letters. Zero fields match everything; the fields
// that are set must all match.
type DeadFilter struct {
	// IDs selects these messages only.
	IDs []uuid.UUID
	// Type, Destination, Key and Reason match the message type, destination,
	// ordering key and the reason it died (a Reason* constant) exactly.
	Type, Destination, Key, Reason string
	// OlderThan selects the dead letters that died at least this long ago,
	// on the database's clock; it must not be negative.
	OlderThan time.Duration
	// After selects the dead letters that come after a cursor in the order
	// [Store.DeadLetters] lists them (newest first): those that died
	// earlier, or at the same instant with a greater id. Set it to the
	// [DeadLetter.Cursor] of a page's last item for the next page. The
	// zero Cursor selects from the start.
	After Cursor
}

// Cursor is a place in a listing of dead letters or parked keys: the
// instant the listing sorts by (when the message died, or was parked) and
// the id that breaks ties. Listing from a cursor is stable while rows come
// and go: a page starts right after the last item of the one before.
type Cursor struct {
	At time.Time
	ID uuid.UUID
}

// IsZero reports whether c is the start of a listing.
func (c Cursor) IsZero() bool { return c.At.IsZero() && c.ID == uuid.Nil }

// args returns the cursor's parameters: NULLs for the start.
func (c Cursor) args() []any {
	if c.IsZero() {
		return []any{nil, nil}
	}
	return []any{pgTime(c.At), c.ID.String()}
}

// ParkedFilter selects parked ordered rows, that is the parked keys. Zero
// fields match everything.
type ParkedFilter struct {
	// Type, Destination and Key match the parked row's message type,
	// destination and ordering key exactly.
	Type, Destination, Key string
	// OlderThan selects the rows parked at least this long ago.
	OlderThan time.Duration
	// After selects the keys that come after a cursor in the order
	// [Store.ParkedKeys] lists them (longest parked first): those parked
	// later, or at the same instant with a head of greater id. Set it to the
	// [ParkedKey.Cursor] of a page's last item for the next page.
	After Cursor
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

// DeadReasons returns every reason a message leaves delivery for, in the
// order tools list them.
func DeadReasons() []string {
	return []string{ReasonPermanent, ReasonExhausted, ReasonCorrupt, ReasonSkipped, ReasonOverLimit}
}

// DeadLetter is a message out of delivery for good, as stored in the
// dead-letter table.
type DeadLetter struct {
	// Row is the message with its attempts and last error. A row whose stored
	// headers do not decode has Corrupt set and nil Headers.
	Row
	// Reason is why it left delivery: a Reason* constant.
	Reason string
	// DeadAt is when it did.
	DeadAt time.Time
}

// Cursor returns the place of d in the listing of dead letters, for the
// page after it ([DeadFilter.After]).
func (d DeadLetter) Cursor() Cursor { return Cursor{At: d.DeadAt, ID: d.ID} }

// ParkedKey is an ordering key whose delivery is stopped at a parked row.
type ParkedKey struct {
	// Head is the parked row, the key's first.
	Head Row
	// ParkedAt is when it was parked.
	ParkedAt time.Time
	// Waiting counts the key's later rows, held behind it.
	Waiting int
}

// Cursor returns the place of p in the listing of parked keys, for the
// page after it ([ParkedFilter.After]).
func (p ParkedKey) Cursor() Cursor { return Cursor{At: p.ParkedAt, ID: p.Head.ID} }

type redriveQueries struct {
	listDead, requeueDead, purgeDead  string
	listParked, retryParked, skipHead string
	listParkedHeads                   string
}

// deadColumns are storesql.RowColumns as the dead-letter table has them: it holds no
// claim or retry time.
const deadColumns = `id, message_type, transport, destination, body, headers, ordering_key, lane,
    created_at, deliver_at, attempts, last_error, trace_parent, trace_state, NULL::timestamptz, NULL::timestamptz`

// deadMatch and parkedMatch are the filter predicates. deadMatch's
// parameters: $1 ids (text array literal, NULL for any), $2 type, $3
// destination, $4 key, $5 reason, $6 OlderThan in microseconds, $7 and $8
// the cursor (NULL, NULL for the start). parkedMatch's: $1 type, $2
// destination, $3 key, $4 OlderThan in microseconds, $5 and $6 the cursor.
const (
	deadMatch = `($1::text IS NULL OR id = ANY($1::text::uuid[]))
  AND ($2 = '' OR message_type = $2) AND ($3 = '' OR destination = $3)
  AND ($4 = '' OR ordering_key = $4) AND ($5 = '' OR reason = $5)
  AND dead_at <= now() - $6 * interval '1 microsecond'
  AND ($7::timestamptz IS NULL OR dead_at < $7 OR (dead_at = $7 AND id > $8::text::uuid))`
	parkedMatch = `o.lane IS NOT NULL AND o.parked_at IS NOT NULL
  AND ($1 = '' OR o.message_type = $1) AND ($2 = '' OR o.destination = $2)
  AND ($3 = '' OR o.ordering_key = $3)
  AND o.parked_at <= now() - $4 * interval '1 microsecond'
  AND ($5::timestamptz IS NULL OR o.parked_at > $5 OR (o.parked_at = $5 AND o.id > $6::text::uuid))`
)

func buildRedriveQueries(n names) *redriveQueries {
	insertDead := `INSERT INTO ` + n.Dead + ` AS d (id, message_type, transport, destination, body, headers,
    ordering_key, lane, created_at, deliver_at, trace_parent, trace_state, attempts, last_error, reason)`
	return &redriveQueries{
		listDead: `SELECT ` + deadColumns + `, reason, dead_at FROM ` + n.Dead + `
WHERE ` + deadMatch + `
ORDER BY dead_at DESC, id LIMIT $9`,
		// Requeued messages keep their ids and content; their attempts start
		// again from zero and their last error stays for the record. A
		// requeued ordered message goes back into its lane at its original
		// place in id order. An id already in the outbox fails the statement,
		// which changes nothing.
		requeueDead: `WITH moved AS (
    DELETE FROM ` + n.Dead + ` WHERE id = ANY(ARRAY(
        SELECT id FROM ` + n.Dead + ` WHERE ` + deadMatch + ` FOR UPDATE SKIP LOCKED))
    RETURNING *)
INSERT INTO ` + n.Outbox + ` (id, message_type, transport, destination, body, headers, ordering_key, lane,
    created_at, deliver_at, trace_parent, trace_state, attempts, last_error)
SELECT id, message_type, transport, destination, body, headers, ordering_key, lane,
    created_at, deliver_at, trace_parent, trace_state, 0, last_error FROM moved`,
		purgeDead: `DELETE FROM ` + n.Dead + ` WHERE id = ANY(ARRAY(
    SELECT id FROM ` + n.Dead + ` WHERE ` + deadMatch + ` FOR UPDATE SKIP LOCKED))`,
		// The rows of the listed keys are counted in one pass over the
		// outbox, grouped by key: a count per key would read the table
		// once for each.
		listParked: `WITH heads AS (
    SELECT ` + prefixed("o.", storesql.RowColumns) + `, o.parked_at FROM ` + n.Outbox + ` AS o
    WHERE ` + parkedMatch + `
    ORDER BY o.parked_at, o.id LIMIT $7),
keys AS (
    SELECT w.lane, w.ordering_key, count(*) AS n FROM ` + n.Outbox + ` AS w
    WHERE w.lane IS NOT NULL AND (w.lane, w.ordering_key) IN (SELECT lane, ordering_key FROM heads)
    GROUP BY w.lane, w.ordering_key)
SELECT ` + prefixed("h.", storesql.RowColumns) + `, h.parked_at, coalesce(k.n, 1) - 1
FROM heads AS h LEFT JOIN keys AS k ON k.lane = h.lane AND k.ordering_key = h.ordering_key
ORDER BY h.parked_at, h.id`,
		// listParked without the count of the rows behind each key.
		listParkedHeads: `SELECT ` + prefixed("o.", storesql.RowColumns) + `, o.parked_at, -1
FROM ` + n.Outbox + ` AS o
WHERE ` + parkedMatch + `
ORDER BY o.parked_at, o.id LIMIT $7`,
		// The key's head becomes eligible again with its attempts from zero;
		// its later rows follow it in order. The head and the rows behind
		// it are stamped with this transaction's id, as if written now, so
		// that workers reading the lane from a cursor find them (see
		// cursor.go). It returns the heads released.
		retryParked: `WITH heads AS (
    UPDATE ` + n.Outbox + ` AS o SET parked_at = NULL, attempts = 0, retry_at = NULL, xact_id = pg_current_xact_id()
    WHERE ` + parkedMatch + `
    RETURNING o.lane, o.ordering_key),
behind AS (
    ` + stampBehind(n, "heads") + `)
SELECT count(*) FROM heads`,
		// The parked head moves to the dead letters; the key's later rows,
		// never parked themselves, are released by its absence.
		skipHead: `WITH head AS (
    DELETE FROM ` + n.Outbox + ` WHERE id = (
        SELECT o.id FROM ` + n.Outbox + ` AS o WHERE ` + parkedMatch + `
        ORDER BY o.id LIMIT 1 FOR UPDATE)
    RETURNING *),
behind AS (
    ` + stampBehind(n, "head") + `)
` + insertDead + `
SELECT id, message_type, transport, destination, body, headers, ordering_key, lane, created_at, deliver_at,
    trace_parent, trace_state, attempts, last_error, '` + ReasonSkipped + `' FROM head
ON CONFLICT (id) DO UPDATE SET reason = EXCLUDED.reason, attempts = EXCLUDED.attempts,
    last_error = EXCLUDED.last_error, dead_at = now()`,
	}
}

// stampBehind is the UPDATE that stamps the pending rows of the keys in the
// relation keys (lane, ordering_key), released from behind a parked head,
// with the releasing transaction's id (see cursor.go).
func stampBehind(n names, keys string) string {
	return `UPDATE ` + n.Outbox + ` AS w SET xact_id = pg_current_xact_id()
    FROM (SELECT DISTINCT lane, ordering_key FROM ` + keys + `) AS k
    WHERE w.lane = k.lane AND w.ordering_key = k.ordering_key AND w.lane IS NOT NULL AND w.parked_at IS NULL`
}

// prefixed qualifies each column of a comma-separated list with p.
func prefixed(p, cols string) string {
	out := make([]byte, 0, len(cols)*2)
	start := true
	for i := 0; i < len(cols); i++ {
		c := cols[i]
		if start && c != ' ' && c != '\n' {
			out = append(out, p...)
			start = false
		}
		out = append(out, c)
		if c == ',' {
			start = true
		}
	}
	return string(out)
}

func (f DeadFilter) args() ([]any, error) {
	if f.OlderThan < 0 {
		return nil, fmt.Errorf("%w: OlderThan must not be negative, got %s", ErrInvalidArgument, f.OlderThan)
	}
	ids := sql.NullString{}
	if f.IDs != nil {
		var a storesql.ArrayLiteral
		for _, id := range f.IDs {
			a.UUID(id)
		}
		ids = sql.NullString{String: a.String(), Valid: true}
	}
	return append([]any{ids, f.Type, f.Destination, f.Key, f.Reason, f.OlderThan.Microseconds()}, f.After.args()...), nil
}

func (f ParkedFilter) args() ([]any, error) {
	if f.OlderThan < 0 {
		return nil, fmt.Errorf("%w: OlderThan must not be negative, got %s", ErrInvalidArgument, f.OlderThan)
	}
	return append([]any{f.Type, f.Destination, f.Key, f.OlderThan.Microseconds()}, f.After.args()...), nil
}

// DeadLetters returns up to limit dead letters matching f, newest first, with
// their content.
func (s *Store) DeadLetters(ctx context.Context, f DeadFilter, limit int) ([]DeadLetter, error) {
	args, err := f.args()
	if err != nil {
		return nil, err
	}
	return list(ctx, s.db, "dead letters", s.rdq.listDead, args, limit, func(sc *storesql.Scratch, rows *sql.Rows, d *DeadLetter) error {
		err := scanKeepingCorrupt(sc, rows, &d.Row, &d.Reason, &d.DeadAt)
		d.DeadAt = d.DeadAt.UTC()
		return err
	})
}

// RequeueDead moves the dead letters matching f back into the outbox, with
// their ids and content, attempts from zero, and returns how many it moved.
// An empty filter requeues every dead letter.
func (s *Store) RequeueDead(ctx context.Context, f DeadFilter) (int64, error) {
	args, err := f.args()
	if err != nil {
		return 0, err
	}
	return s.affected(ctx, "requeue dead letters", s.rdq.requeueDead, args...)
}

// PurgeDead deletes the dead letters matching f for good and returns how many
// it deleted. An empty filter deletes every dead letter.
func (s *Store) PurgeDead(ctx context.Context, f DeadFilter) (int64, error) {
	args, err := f.args()
	if err != nil {
		return 0, err
	}
	return s.affected(ctx, "purge dead letters", s.rdq.purgeDead, args...)
}

// ParkedKeys returns up to limit parked keys matching f, longest parked
// first, each with its parked head and how many rows wait behind it.
// Counting those reads the outbox once, whatever the number of keys; on a
// large backlog, [Store.ParkedHeads] lists the keys at the cost of the
// parked rows alone.
func (s *Store) ParkedKeys(ctx context.Context, f ParkedFilter, limit int) ([]ParkedKey, error) {
	return s.parked(ctx, "parked keys", s.rdq.listParked, f, limit)
}

// ParkedHeads is [Store.ParkedKeys] without the count of the rows waiting
// behind each key (Waiting is -1): it reads the parked rows only, through
// their index, however large the lanes.
func (s *Store) ParkedHeads(ctx context.Context, f ParkedFilter, limit int) ([]ParkedKey, error) {
	return s.parked(ctx, "parked heads", s.rdq.listParkedHeads, f, limit)
}

func (s *Store) parked(ctx context.Context, op, query string, f ParkedFilter, limit int) ([]ParkedKey, error) {
	args, err := f.args()
	if err != nil {
		return nil, err
	}
	return list(ctx, s.db, op, query, args, limit, func(sc *storesql.Scratch, rows *sql.Rows, p *ParkedKey) error {
		err := scanKeepingCorrupt(sc, rows, &p.Head, &p.ParkedAt, &p.Waiting)
		p.ParkedAt = p.ParkedAt.UTC()
		return err
	})
}

// list runs an operator's listing query with its filter's args and limit
// (which must be positive), and scans each row it returns with scan.
func list[T any](ctx context.Context, db DBTX, op, query string, args []any, limit int, scan func(*storesql.Scratch, *sql.Rows, *T) error) ([]T, error) {
	if limit < 1 {
		return nil, fmt.Errorf("%w: limit must be positive, got %d", ErrInvalidArgument, limit)
	}
	var sc storesql.Scratch
	return storesql.QueryRows(ctx, db, op, query, append(args, limit), func(rows *sql.Rows, v *T) error { return scan(&sc, rows, v) })
}

// RetryParked makes the parked rows matching f eligible again, attempts from
// zero, and returns how many it released. Each key resumes at its parked
// head, in order. An empty filter releases every parked key.
func (s *Store) RetryParked(ctx context.Context, f ParkedFilter) (int64, error) {
	args, err := f.args()
	if err != nil {
		return 0, err
	}
	return s.count(ctx, "retry parked", s.rdq.retryParked, args...)
}

// SkipParkedHead moves the parked head of key to the dead letters (reason
// [ReasonSkipped]), so that the key's later messages are delivered without
// it: an explicit break of the key's order, which the caller should log. It
// returns 1, or 0 when key has no parked row.
func (s *Store) SkipParkedHead(ctx context.Context, key string) (int64, error) {
	if key == "" {
		return 0, fmt.Errorf("%w: key is empty", ErrInvalidArgument)
	}
	args, err := ParkedFilter{Key: key}.args()
	if err != nil {
		return 0, err
	}
	return s.affected(ctx, "skip parked head", s.rdq.skipHead, args...)
}
