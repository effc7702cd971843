package consume

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
	"github.com/relayer-go/relayer/internal/storesql"
	"github.com/relayer-go/relayer/internal/tables"
	"github.com/relayer-go/relayer/store"
)

// KeyHolding says what a message with an ordering key that fails does to
// the key's later messages ([Options].HoldKeys).
type KeyHolding int

const (
	// HoldKeysAuto holds keys where the adapter hands a key's messages
	// over in the order the producer committed them (one at a time: NATS
	// and RabbitMQ with Concurrency 1, every Kafka partition), and
	// nowhere else. The default.
	HoldKeysAuto KeyHolding = iota
	// HoldKeysOn holds keys with every adapter that runs the held keys.
	HoldKeysOn
	// HoldKeysOff never holds keys: a failing message is delivered again
	// by the broker, after the messages delivered meanwhile (JetStream,
	// RabbitMQ), or retried in place, holding its partition (Kafka).
	HoldKeysOff
)

func (k KeyHolding) String() string {
	switch k {
	case HoldKeysAuto:
		return "auto"
	case HoldKeysOn:
		return "on"
	case HoldKeysOff:
		return "off"
	}
	return fmt.Sprintf("KeyHolding(%d)", int(k))
}

// hasSQLState reports an error of the database with SQLSTATE code.
func hasSQLState(err error, code string) bool {
	var pg interface{ SQLState() string }
	return errors.As(err, &pg) && pg.SQLState() == code
}

// ErrSkipped is the cause a held key's first message is dead-lettered with
// when an operator skipped it.
var ErrSkipped = errors.New("consume: skipped by an operator while its key was held")

// DeadLetters is where an adapter sends a message the consumer gives up on
// and holds no broker delivery of: one handled from the consumer's
// database behind a held key. Each adapter's dead letters go where its
// Delivery.DeadLetter sends them, with the same headers.
type DeadLetters interface {
	// DeadLetter keeps m where operators find the adapter's dead letters,
	// with cause; an error leaves m held, to be tried again.
	DeadLetter(ctx context.Context, m *relayer.Message, cause error) error
}

// Rows are the rows a [RowQuerier] returns. A *sql.Rows is one.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// RowQuerier is implemented by a [Txn] whose data layer reads rows in its
// transaction other than through database/sql (relayerpgx's): the consumer
// reads its held keys through it. A Txn without it reads them with
// QueryContext, and a data layer that can do neither does not hold keys.
type RowQuerier interface {
	QueryRows(ctx context.Context, query string, args ...any) (Rows, error)
}

// queryRows runs query through q's RowQuerier, or its QueryContext.
func queryRows(ctx context.Context, q store.DBTX, query string, args ...any) (Rows, error) {
	if rq, ok := q.(RowQuerier); ok {
		return rq.QueryRows(ctx, query, args...)
	}
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// HeldKeysOptions are what an adapter tells [Consumer.StartHeldKeys].
type HeldKeysOptions struct {
	// Ordered says the adapter hands a key's messages over one at a time,
	// in the order the broker keeps them: [HoldKeysAuto] then holds keys.
	Ordered bool
	// DeadLetters receives the held messages given up on. Required.
	DeadLetters DeadLetters
	// Poll is how often the held keys whose first message is due are
	// looked for. Default: 500ms.
	Poll time.Duration
}

// heldKeys is a consumer's side of key holding: whether it holds keys,
// the statements it does it with, and its drain.
type heldKeys struct {
	// check is set once the held keys' tables were found readable: a
	// message whose key is held waits behind it, whatever HoldKeys says,
	// so that turning holding off never lets a key's later messages
	// overtake the ones already waiting.
	check atomic.Bool
	// on is set once an adapter started the held keys with holding on: a
	// failing message with a key then holds its key.
	on atomic.Bool
	q  heldQueries

	// The drain, shared by every StartHeldKeys of the consumer running.
	mu     sync.Mutex
	users  int
	cancel context.CancelFunc
	done   chan struct{}
	// wake tells the drain that a key was held, so that it looks again
	// when the key's first message is due rather than at its next poll.
	wake chan struct{}
}

// signal wakes the drain, if it sleeps.
func (h *heldKeys) signal() {
	h.mu.Lock()
	wake := h.wake
	h.mu.Unlock()
	if wake != nil {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
}

// holds reports whether m's failure holds its key.
func (h *heldKeys) holds(m *relayer.Message) bool { return m.Key != "" && h.on.Load() }

// checks reports whether m's delivery looks for its key among the held.
func (h *heldKeys) checks(m *relayer.Message) bool { return m.Key != "" && h.check.Load() }

// heldQueries are the statements of key holding, built from validated
// names.
type heldQueries struct {
	record, store, hold, due, lock, done, retry, free string
}

func buildHeldQueries(n tables.Names) heldQueries {
	const columns = `consumer, ordering_key, message_id, message_type, destination, headers, body, trace_parent, trace_state, created_at`
	const values = `$1, $3, $2::text::uuid, $4, $5, $6, $7, $8, $9, $10`
	rec := `rec AS (
    INSERT INTO ` + n.Inbox + ` (consumer, message_id) VALUES ($1, $2::text::uuid)
    ON CONFLICT (consumer, message_id) DO NOTHING RETURNING 1)`
	return heldQueries{
		// The inbox record, and whether the key is held. The share lock on
		// the held row, kept to the transaction's end, waits for a drain
		// of the key in progress, which frees the key only once no message
		// waits behind it, and keeps the key held until the message stored
		// behind it commits.
		record: `WITH ` + rec + `
SELECT EXISTS (SELECT 1 FROM rec), EXISTS (SELECT 1 FROM ` + n.InboxHeld + `
    WHERE consumer = $1 AND ordering_key = $3 FOR KEY SHARE)`,
		store: `INSERT INTO ` + n.InboxWaiting + ` (` + columns + `) VALUES (` + values + `)`,
		// A failed message's inbox record, its key held, and the message
		// stored behind the key's waiting ones (first, unless another
		// message holds the key). The upsert waits for a drain of the key
		// in progress: if the drain freed the key meanwhile, the key is
		// held anew, for this message.
		hold: `WITH ` + rec + `,
h AS (
    INSERT INTO ` + n.InboxHeld + ` (consumer, ordering_key, attempts, retry_at, last_error)
    SELECT $1, $3, $11, now() + $12::bigint * interval '1 microsecond', $13 WHERE EXISTS (SELECT 1 FROM rec)
    ON CONFLICT (consumer, ordering_key) DO UPDATE SET since = ` + n.InboxHeld + `.since RETURNING 1),
waits AS (
    INSERT INTO ` + n.InboxWaiting + ` (` + columns + `)
    SELECT ` + values + ` WHERE EXISTS (SELECT 1 FROM rec) RETURNING 1)
SELECT EXISTS (SELECT 1 FROM rec)`,
		// The held keys next due: those due now, up to 16, and when the
		// first of the others is.
		due: `SELECT ordering_key, retry_at <= now(), retry_at FROM ` + n.InboxHeld + `
WHERE consumer = $1 ORDER BY retry_at LIMIT 17`,
		// A due held key, locked, and its first waiting message, if any.
		lock: `SELECT h.attempts, coalesce(h.skip_message::text, ''), w.seq, w.message_id, w.message_type, w.destination, w.headers, w.body,
    w.trace_parent, w.trace_state, w.created_at
FROM ` + n.InboxHeld + ` AS h
LEFT JOIN LATERAL (SELECT * FROM ` + n.InboxWaiting + `
    WHERE consumer = h.consumer AND ordering_key = h.ordering_key ORDER BY seq LIMIT 1) AS w ON true
WHERE h.consumer = $1 AND h.ordering_key = $2 AND h.retry_at <= now()
FOR UPDATE OF h SKIP LOCKED`,
		// The first waiting message done with (handled or dead-lettered):
		// it leaves, and the key is freed when none waits behind it, or
		// its next message is due at once.
		done: `WITH gone AS (
    DELETE FROM ` + n.InboxWaiting + ` WHERE consumer = $1 AND ordering_key = $2 AND seq = $3 RETURNING 1),
rest AS (
    SELECT 1 FROM ` + n.InboxWaiting + ` WHERE consumer = $1 AND ordering_key = $2 AND seq <> $3 LIMIT 1),
freed AS (
    DELETE FROM ` + n.InboxHeld + ` WHERE consumer = $1 AND ordering_key = $2 AND NOT EXISTS (SELECT 1 FROM rest) RETURNING 1)
UPDATE ` + n.InboxHeld + ` SET attempts = 0, last_error = NULL, skip_message = NULL, retry_at = now()
WHERE consumer = $1 AND ordering_key = $2 AND EXISTS (SELECT 1 FROM rest)`,
		retry: `UPDATE ` + n.InboxHeld + ` SET attempts = $3, retry_at = now() + $4::bigint * interval '1 microsecond', last_error = $5
WHERE consumer = $1 AND ordering_key = $2`,
		free: `DELETE FROM ` + n.InboxHeld + ` AS h WHERE consumer = $1 AND ordering_key = $2
  AND NOT EXISTS (SELECT 1 FROM ` + n.InboxWaiting + ` AS w WHERE w.consumer = h.consumer AND w.ordering_key = h.ordering_key)`,
	}
}

// storedArgs are the arguments of m's row in the waiting table ($1 to $10).
func storedArgs(consumer string, m *relayer.Message) ([]any, error) {
	hs, err := headers.Encode(m.Headers)
	if err != nil {
		return nil, fmt.Errorf("consume: the message's headers: %w", err)
	}
	body := m.Body
	if body == nil {
		body = []byte{}
	}
	var created any
	if !m.CreatedAt.IsZero() {
		created = m.CreatedAt
	}
	return []any{consumer, m.ID.String(), m.Key, m.Type, m.Destination, hs, body, nullText(m.TraceParent), nullText(m.TraceState), created}, nil
}

func nullText(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// record records m in the inbox through q, and stores it behind its key
// when the key is held: first is false for a duplicate, waits true for a
// message stored.
func (h *heldKeys) record(ctx context.Context, q store.DBTX, consumer string, m *relayer.Message) (first, waits bool, err error) {
	rows, err := queryRows(ctx, q, h.q.record, consumer, m.ID.String(), m.Key)
	if err != nil {
		return false, false, fmt.Errorf("consume: record inbox: %w", err)
	}
	if rows.Next() {
		err = rows.Scan(&first, &waits)
	}
	if cerr := rows.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = rows.Err()
	}
	if err != nil || !first || !waits {
		return first, false, wrapRecord(err)
	}
	args, err := storedArgs(consumer, m)
	if err != nil {
		return false, false, err
	}
	if _, err := q.ExecContext(ctx, h.q.store, args...); err != nil {
		return false, false, fmt.Errorf("consume: store behind held key: %w", err)
	}
	return true, true, nil
}

func wrapRecord(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("consume: record inbox: %w", err)
}

// holdKey records m, whose handler failed with cause on its attempt, in the
// inbox, holds its key and stores it first behind it, to be tried again
// after delay; held is false when another delivery of m committed
// meanwhile. Database faults are waited out.
func (c *Consumer) holdKey(ctx context.Context, m *relayer.Message, attempt int, delay time.Duration, cause error) (held bool, err error) {
	args, err := storedArgs(c.opts.Name, m)
	if err != nil {
		return false, err
	}
	args = append(args, attempt, delay.Microseconds(), storesql.CleanText(cause.Error()))
	for {
		err = c.inTx(ctx, func(q store.DBTX, _ func(context.Context, *relayer.Message) error) error {
			rows, err := queryRows(ctx, q, c.held.q.hold, args...)
			if err != nil {
				return &ownStatement{fmt.Errorf("consume: hold key: %w", err)}
			}
			defer rows.Close()
			if rows.Next() {
				if err := rows.Scan(&held); err != nil {
					return &ownStatement{fmt.Errorf("consume: hold key: %w", err)}
				}
			}
			if err := rows.Close(); err != nil {
				return &ownStatement{fmt.Errorf("consume: hold key: %w", err)}
			}
			return nil
		})
		if err == nil {
			c.outage.committed()
			if held {
				c.held.signal()
			}
			return held, nil
		}
		if !c.waitedOut(ctx, err) {
			return held, err
		}
	}
}

// head is a held key's first waiting message, as its drain locked it.
type head struct {
	attempts int
	// skip is set when an operator skipped the first waiting message
	// (heldkeys.Skip names the message, so that a skip meant for one that
	// was handled meanwhile skips nothing).
	skip        bool
	skipMessage string
	waiting     bool // a message waits: seq and m are set
	seq         int64
	m           relayer.Message
}

// lockHead locks key's held row, when it is due and no other drain holds
// it, and reads its first waiting message; ok is false otherwise.
func (c *Consumer) lockHead(ctx context.Context, q store.DBTX, key string) (hd head, ok bool, err error) {
	rows, err := queryRows(ctx, q, c.held.q.lock, c.opts.Name, key)
	if err != nil {
		return hd, false, err
	}
	defer rows.Close()
	if !rows.Next() {
		return hd, false, rows.Err()
	}
	var (
		seq                sql.NullInt64
		id, typ, dest      sql.NullString
		hs, body           []byte
		parent, traceState sql.NullString
		created            sql.NullTime
	)
	if err := rows.Scan(&hd.attempts, &hd.skipMessage, &seq, &id, &typ, &dest, &hs, &body, &parent, &traceState, &created); err != nil {
		return hd, false, err
	}
	if err := rows.Close(); err != nil {
		return hd, false, err
	}
	if !seq.Valid {
		return hd, true, nil
	}
	hd.waiting, hd.seq = true, seq.Int64
	mid, err := uuid.Parse(id.String)
	if err != nil {
		return hd, false, fmt.Errorf("consume: a waiting message's id %q: %w", id.String, err)
	}
	decoded, err := headers.Decode(hs, nil)
	if err != nil {
		return hd, false, fmt.Errorf("consume: the headers of waiting message %s: %w", mid, err)
	}
	hd.m = relayer.Message{ID: mid, Type: typ.String, Key: key, Destination: dest.String, Headers: decoded, Body: body,
		TraceParent: parent.String, TraceState: traceState.String}
	if created.Valid {
		hd.m.CreatedAt = created.Time
	}
	hd.skip = hd.skipMessage != "" && hd.skipMessage == mid.String()
	return hd, true, nil
}

// StartHeldKeys is what an adapter runs before it fetches: it decides
// whether the consumer holds keys (Options.HoldKeys, and opts.Ordered for
// [HoldKeysAuto]) and drains the held keys in the background until ctx
// ends or stop is called, which waits for the drain to return. A consumer
// that holds keys handles a failing message with an ordering key by
// holding its key: the message, recorded in the inbox, is stored in the
// consumer's database with the key's later messages behind it as they
// arrive, each acknowledged to the broker; the drain tries the first one
// again after the Retry policy's backoff, and once it succeeds (or is
// dead-lettered through opts.DeadLetters after its attempts, or at once
// for a permanent error or an operator's skip) handles the others in the
// order they arrived, then frees the key. Other keys flow meanwhile.
//
// Whenever the held keys' tables are readable, the drain runs and a
// message of a key already held waits behind it, even with holding off
// (HoldKeysOff, or HoldKeysAuto and an adapter that is not ordered), so
// that turning holding off never lets a key's later messages overtake the
// ones waiting. A consumer shared by several Consume calls runs one drain,
// which dead-letters through the first call's DeadLetters.
//
// It returns an error wrapping [ErrInvalidOptions] without DeadLetters,
// and one wrapping [ErrNotReady] when HoldKeys is [HoldKeysOn] and the
// held keys' tables do not exist (migration 9) or the consumer's role may
// not use them, or its data layer cannot read rows in its transaction;
// otherwise keys are then not held, and the log says so once where they
// would have been, so that a consumer can be deployed before its
// migration runs.
func (c *Consumer) StartHeldKeys(ctx context.Context, opts HeldKeysOptions) (stop func(), err error) {
	if opts.DeadLetters == nil {
		return nil, fmt.Errorf("%w: StartHeldKeys needs DeadLetters, where held messages given up on go", ErrInvalidOptions)
	}
	if opts.Poll <= 0 {
		opts.Poll = 500 * time.Millisecond
	}
	mode := c.opts.HoldKeys
	hold := mode == HoldKeysOn || (mode == HoldKeysAuto && opts.Ordered)
	if err := c.heldKeysReadable(ctx); err != nil {
		switch {
		case ctx.Err() != nil:
			return func() {}, nil
		case mode == HoldKeysOn:
			return nil, fmt.Errorf("%w: HoldKeys is on, and the consumer cannot read its held keys: %w", ErrNotReady, err)
		case hold:
			c.opts.Logger.Warn("consume: keys are not held: the consumer cannot read its held keys; a failing message is delivered again by the broker",
				slog.String("consumer", c.opts.Name), slog.String("error", err.Error()))
		}
		return func() {}, nil
	}
	c.held.check.Store(true)
	if hold {
		c.held.on.Store(true)
	}
	return c.held.startDrain(ctx, func(ctx context.Context) { c.drainHeld(ctx, opts) }), nil
}

// startDrain runs drain unless it runs already, and returns the function
// that ends this caller's use of it: the last one stops it and waits.
func (h *heldKeys) startDrain(ctx context.Context, drain func(ctx context.Context)) (stop func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.users++
	if h.users == 1 {
		dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		h.cancel, h.done = cancel, make(chan struct{})
		if h.wake == nil {
			h.wake = make(chan struct{}, 1)
		}
		done := h.done
		go func() {
			defer close(done)
			drain(dctx)
		}()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			h.users--
			last := h.users == 0
			cancel, done := h.cancel, h.done
			h.mu.Unlock()
			if last {
				cancel()
				<-done
			}
		})
	}
}

// heldKeysReadable looks for due keys once, to tell whether the held keys'
// tables exist (migration 9) and the data layer's transaction reads rows;
// another fault of the database is waited out.
func (c *Consumer) heldKeysReadable(ctx context.Context) error {
	for {
		_, _, err := c.dueKeys(ctx)
		switch {
		case err == nil:
			return nil
		case hasSQLState(err, "42P01"):
			return fmt.Errorf("the held keys' tables (migration 9) do not exist: run `%s` or store.Migrate: %w",
				migrateCommand(c.inbox.Options()), err)
		case hasSQLState(err, "42501"):
			return fmt.Errorf("the consumer's role may not use the held keys' tables: grant it SELECT, INSERT, UPDATE and DELETE on them: %w", err)
		case !c.waitedOut(ctx, err):
			return err
		}
	}
}

// Start is what an adapter runs before it fetches: [Consumer.AwaitDatabase],
// then [Consumer.StartHeldKeys]. It returns ctx's error when ctx ends
// while the database does not answer; stop ends the held keys' drain.
func (c *Consumer) Start(ctx context.Context, opts HeldKeysOptions) (stop func(), err error) {
	if err := c.AwaitDatabase(ctx); err != nil {
		return nil, err
	}
	return c.StartHeldKeys(ctx, opts)
}
