package consume

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/inbox"
	"github.com/relayer-go/relayer/internal/tables"
	"github.com/relayer-go/relayer/store"
)

// Sentinel errors; test with [errors.Is].
var (
	// ErrInvalidOptions is returned by [New] and [Options.Validate] for
	// options that cannot work; the message names the field.
	ErrInvalidOptions = errors.New("consume: invalid options")
	// ErrNotRelayer is the cause a broker message is dead-lettered with when
	// it carries no Relayer message id (it was not published by a Relayer
	// transport) or one that does not parse: the consumer never makes one
	// up, since a made-up id would deduplicate nothing.
	ErrNotRelayer = errors.New("consume: not a Relayer message")
	// ErrNoWriter is returned by [Tx.Publish] and [Tx.PublishAll] of a
	// consumer built without [Options.Writer].
	ErrNoWriter = errors.New("consume: no writer for follow-up messages (Options.Writer)")
)

// Delivery is one broker message as an adapter hands it to
// [Consumer.Handle], with the broker's ways to settle it. The adapter of
// each broker implements it; the Consumer calls exactly one of Ack, Retry
// and DeadLetter, once the database transaction that handled the message
// has ended.
type Delivery interface {
	// Message returns the message as the producer's outbox stored it: id,
	// type, key, headers and body, and the destination it was delivered
	// from. An error means the broker message is not a Relayer message
	// (no id) or cannot be read; the Consumer dead-letters it with the
	// error, wrapped with ErrNotRelayer.
	Message() (relayer.Message, error)
	// Attempt is which delivery of the message this is, from 1, as the
	// broker counts them; 0 when the broker does not count.
	Attempt() int
	// Ack tells the broker the message is done with: handled and
	// committed, or a duplicate.
	Ack(ctx context.Context) error
	// Retry asks the broker to deliver the message again, no sooner than
	// after delay when the broker can wait (0: as soon as it can).
	Retry(ctx context.Context, delay time.Duration) error
	// DeadLetter takes the message out of delivery for good and keeps it,
	// with cause, where operators find it: the adapter's dead-letter
	// destination.
	DeadLetter(ctx context.Context, cause error) error
}

// Handler handles one message in the consumer's transaction tx: it writes
// the message's effects through tx, and may publish follow-up messages
// with tx.Publish, which commit with them. An error, or a panic, rolls the
// whole transaction back; the message is then retried, or dead-lettered
// once its attempts are spent or at once for an error matching
// relayer.ErrPermanent. m is the Delivery's message; the handler must not
// keep it, or its body, past its return.
type Handler func(ctx context.Context, tx *Tx, m *relayer.Message) error

// Consumer handles the messages adapters hand it ([Consumer.Handle]), each
// in a database transaction together with its inbox record, and settles
// each with the broker after that transaction ended: a message is
// acknowledged only once its effects committed, and its effects commit
// once however often it is delivered. It is safe for concurrent use.
type Consumer struct {
	opts  Options
	retry relayer.Retry
	inbox *inbox.Inbox
	stats counters
	// inTx runs body in a transaction of the consumer's, which it commits
	// when body returns nil and rolls back otherwise; an error of begin or
	// commit is an *ownStatement.
	inTx func(ctx context.Context, body txBody) error
	// check asks the database whether the consumer can work on it (Check).
	check func(ctx context.Context) error
	// outage holds the deliveries the database failed until it answers.
	outage *outage
	// held holds the keys of failing messages (see StartHeldKeys).
	held heldKeys
}

// txBody is what runs in one of the consumer's transactions: its own
// statements run on q, and handle runs the handler for a message in the
// same transaction, a panic turned into an error.
type txBody func(q store.DBTX, handle func(ctx context.Context, m *relayer.Message) error) error

// New returns a consumer that runs handler on db for each message, in a
// database/sql transaction. It validates opts and does not touch the
// database; the inbox table comes with the outbox tables (store.Migrate).
// Its errors wrap [ErrInvalidOptions], or store.ErrNilDB for a nil db.
func New(db *sql.DB, handler Handler, opts Options) (*Consumer, error) {
	if db == nil {
		return nil, fmt.Errorf("consume: %w", store.ErrNilDB)
	}
	if handler == nil {
		return nil, fmt.Errorf("%w: nil handler", ErrInvalidOptions)
	}
	if opts.Writer != nil && opts.Tables == (store.Tables{}) {
		opts.Tables = opts.Writer.Tables()
	}
	c, err := newConsumer(opts)
	if err != nil {
		return nil, err
	}
	c.inTx = func(ctx context.Context, body txBody) error { return c.inSQLTx(ctx, db, handler, body) }
	c.check = func(ctx context.Context) error {
		if err := c.checkOn(ctx, db); err != nil {
			return err
		}
		if c.opts.Writer == nil {
			return nil
		}
		st, err := store.New(db, c.opts.Writer.Tables())
		if err != nil {
			return err
		}
		if _, err := st.CheckSchema(ctx); err != nil && !errors.Is(err, store.ErrSchemaNewer) {
			return fmt.Errorf("consume: the writer's outbox: %w", err)
		}
		return nil
	}
	return c, nil
}

// Txn is a message's transaction as a consumer made with [NewTx] uses it:
// the inbox record is written through it (ExecContext), and the consumer
// commits or rolls it back. A *sql.Tx is one; a data layer's adapter
// wraps its own transaction.
type Txn interface {
	store.DBTX
	Commit() error
	Rollback() error
}

// NewTx returns a consumer whose handler gets a transaction of the
// caller's data layer, T (a *gorm.DB, a bun.Tx, a *sqlx.Tx): for each
// message, begin begins one with opts.TxOptions and returns it with the
// Txn under it, where the consumer records the inbox and which it commits
// or rolls back; the handler must do neither. The data-layer modules wrap
// it (relayergorm.NewConsumer, relayerbun.NewConsumer,
// relayersqlx.NewConsumer, relayerpgx.NewConsumer), and their own
// enlistment publishes follow-up
// messages in that transaction, so opts.Writer must be nil; Tx.OnCommit is
// the database/sql handler's alone. Errors are [New]'s.
func NewTx[T any](begin func(ctx context.Context, opts *sql.TxOptions) (T, Txn, error), handler func(ctx context.Context, tx T, m *relayer.Message) error, opts Options) (*Consumer, error) {
	if begin == nil || handler == nil {
		return nil, fmt.Errorf("%w: nil begin or handler", ErrInvalidOptions)
	}
	if opts.Writer != nil {
		return nil, fmt.Errorf("%w: Writer is for New's database/sql handlers; publish follow-ups through the data layer's enlistment", ErrInvalidOptions)
	}
	c, err := newConsumer(opts)
	if err != nil {
		return nil, err
	}
	c.inTx = func(ctx context.Context, body txBody) error {
		tx, txn, err := begin(ctx, c.opts.TxOptions)
		if err != nil {
			return &ownStatement{fmt.Errorf("consume: begin: %w", err)}
		}
		if txn == nil {
			return errors.New("consume: begin returned no Txn")
		}
		committed := false
		defer func() {
			if !committed {
				_ = txn.Rollback()
			}
		}()
		if err := body(txn, func(ctx context.Context, m *relayer.Message) error {
			return c.call(m, func() error { return handler(ctx, tx, m) })
		}); err != nil {
			return err
		}
		if err := txn.Commit(); err != nil {
			return &ownStatement{fmt.Errorf("consume: commit: %w", err)}
		}
		committed = true
		return nil
	}
	c.check = func(ctx context.Context) error {
		return c.inTx(ctx, func(q store.DBTX, _ func(context.Context, *relayer.Message) error) error { return c.checkOn(ctx, q) })
	}
	return c, nil
}

// result is what a message's transaction did.
type result int

const (
	ranHandler result = iota + 1 // the handler ran and its effects committed
	duplicate                    // the inbox held the message: the handler did not run
	stored                       // its key is held: the message waits behind it in the database
)

// run handles m in a transaction of its own: it records m in the inbox
// and, unless it was recorded before or waits behind its held key, runs
// the handler in the same transaction. An error of the consumer's own
// statements is an *ownStatement; the handler's is returned as it is.
func (c *Consumer) run(ctx context.Context, m *relayer.Message) (res result, err error) {
	holding := c.held.checks(m)
	err = c.inTx(ctx, func(q store.DBTX, handle func(context.Context, *relayer.Message) error) error {
		if holding {
			first, waits, err := c.held.record(ctx, q, c.opts.Name, m)
			switch {
			case err != nil:
				return &ownStatement{err}
			case !first:
				res = duplicate
				return nil
			case waits:
				res = stored
				return nil
			}
			res = ranHandler
			return handle(ctx, m)
		}
		handled, err := c.inbox.HandleMessage(ctx, q, c.opts.Name, m, func(ctx context.Context) error { return handle(ctx, m) })
		switch {
		case err != nil && !handled: // the handler runs only once the record succeeded
			return &ownStatement{err}
		case !handled:
			res = duplicate
		default:
			res = ranHandler
		}
		return err
	})
	return res, err
}

// newConsumer validates opts and makes the consumer around them.
func newConsumer(opts Options) (*Consumer, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	ib, err := inbox.New(opts.Tables)
	if err != nil {
		return nil, fmt.Errorf("%w: Tables: %w", ErrInvalidOptions, err)
	}
	c := &Consumer{opts: opts, retry: opts.Retry.WithDefaults(), inbox: ib}
	names := ib.Options()
	c.held.q = buildHeldQueries(tables.Of(names.Schema, names.TablePrefix))
	c.outage = &outage{logger: opts.Logger, name: opts.Name, probe: func(ctx context.Context) error { return c.check(ctx) }}
	return c, nil
}

// Check asks the consumer's database, in one statement, whether the
// consumer can work on it: its inbox table exists, its role may read and
// insert into it, and its transactions are not read-only; with a Writer,
// also whether the writer's outbox tables carry the migrations this
// release needs. A table or privilege that is missing returns an error
// wrapping [ErrNotReady] that says what to run (for the inbox table, the
// `relayer migrate` command for Options.Tables), an outdated outbox one
// wrapping store.ErrSchemaOutdated; a database that cannot be asked
// returns its error.
func (c *Consumer) Check(ctx context.Context) error { return c.check(ctx) }

// AwaitDatabase is what an adapter runs before it fetches: it checks the
// database as [Consumer.Check] does and returns at once an error that
// someone must act on (ErrNotReady, an outdated outbox schema). While the
// database fails with a fault that passes (it is unreachable, restarting,
// or read-only), it logs once and checks again, waiting up to 5 s between
// checks, until the database answers or ctx ends; then it returns
// ctx.Err().
func (c *Consumer) AwaitDatabase(ctx context.Context) error {
	logged := false
	delay := outageBackoff
	for {
		err := c.check(ctx)
		if err == nil {
			if logged {
				c.opts.Logger.Info("consume: the database answers; starting", slog.String("consumer", c.opts.Name))
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, ErrNotReady) || errors.Is(err, store.ErrSchemaOutdated) || errors.Is(err, store.ErrSchemaIncomplete) ||
			classify(err, false) != fault {
			return err
		}
		if !logged {
			logged = true
			c.opts.Logger.Warn("consume: the database does not answer; waiting for it before consuming",
				slog.String("consumer", c.opts.Name), slog.String("error", err.Error()))
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, outageMaxBackoff)
	}
}

// Options returns the consumer's options with defaults applied.
func (c *Consumer) Options() Options {
	o := c.opts
	o.Retry = c.retry
	o.Tables = c.inbox.Options()
	return o
}

// settleTimeout bounds the broker call that settles a delivery once its
// transaction ended, whatever ctx: a consumer that is stopping still
// acknowledges what it committed.
const settleTimeout = 10 * time.Second

// Handle handles one delivery and settles it with the broker:
//
//  1. It reads the message (a broker message without a Relayer id is
//     dead-lettered with [ErrNotRelayer]: an id is never made up).
//  2. It begins a transaction on the consumer's database, records the
//     message in the inbox under the consumer's name and, unless the
//     message was recorded before, runs the handler in that transaction.
//  3. It commits, and only then acknowledges: the handled message, or the
//     duplicate whose handler was not run. A commit that fails, whose
//     outcome may be unknown, acknowledges nothing: the redelivery finds
//     the inbox record if the commit happened and is then a duplicate.
//  4. A handler that fails (or panics) rolls the transaction back. The
//     message is retried after the Retry policy's backoff, or
//     dead-lettered once it failed Retry.MaxAttempts times (as the broker
//     counts deliveries) or at once when the error matches
//     relayer.ErrPermanent.
//
// ctx bounds the handler and the transaction; when it ends first, nothing
// is committed nor settled, and the broker delivers the message again
// (Abandoned). The broker call that settles a delivery gets up to 10 s of
// its own. Handle returns what it did, and an error when settling failed
// (the broker then delivers the message again, and a duplicate is
// acknowledged without its handler) or ctx ended.
func (c *Consumer) Handle(ctx context.Context, d Delivery) (Outcome, error) {
	m, err := d.Message()
	if err == nil && m.ID == uuid.Nil {
		err = errors.New("the message id is the zero UUID")
	}
	if err != nil {
		c.stats.deadLettered.Add(1)
		cause := fmt.Errorf("%w: %w", ErrNotRelayer, err)
		c.opts.Logger.Error("consume: broker message is not a Relayer message; dead-lettered", slog.String("consumer", c.opts.Name),
			slog.String("error", err.Error()))
		return DeadLettered, c.settle(ctx, DeadLettered, func(sctx context.Context) error { return d.DeadLetter(sctx, cause) })
	}
	liftTraceContext(&m)
	res, err := c.runThroughOutages(ctx, &m)
	attempt := max(d.Attempt(), 1)
	switch {
	case err == nil && res == ranHandler:
		c.stats.handled.Add(1)
		return Handled, c.settle(ctx, Handled, d.Ack)
	case err == nil && res == stored:
		c.stats.waiting.Add(1)
		return Waiting, c.settle(ctx, Waiting, d.Ack)
	case err == nil:
		c.stats.duplicates.Add(1)
		return Duplicate, c.settle(ctx, Duplicate, d.Ack)
	case ctx.Err() != nil:
		c.stats.abandoned.Add(1)
		return Abandoned, ctx.Err()
	}
	return c.failed(ctx, d, &m, attempt, err)
}

// failed settles a delivery whose handler failed with err on its attempt:
// dead-lettered for a permanent error or the last attempt; otherwise its
// key held, when the consumer holds keys, or delivered again by the
// broker after the backoff.
func (c *Consumer) failed(ctx context.Context, d Delivery, m *relayer.Message, attempt int, err error) (Outcome, error) {
	attrs := []any{slog.String("consumer", c.opts.Name), slog.String("id", m.ID.String()), slog.String("type", m.Type),
		slog.Int("attempt", attempt), slog.String("error", err.Error())}
	if errors.Is(err, relayer.ErrPermanent) || c.retry.Exhausted(attempt) {
		c.stats.deadLettered.Add(1)
		c.opts.Logger.Error("consume: handler failed for good; the message is dead-lettered", attrs...)
		return DeadLettered, c.settle(ctx, DeadLettered, func(sctx context.Context) error { return d.DeadLetter(sctx, err) })
	}
	delay := jittered(c.retry.Delay(attempt))
	if c.held.holds(m) {
		held, herr := c.holdKey(ctx, m, attempt, delay, err)
		switch {
		case herr == nil && held:
			c.stats.held.Add(1)
			c.opts.Logger.Warn("consume: handler failed; the message's key is held, and it is tried again from the consumer's database",
				append(attrs, slog.String("key", m.Key), slog.Duration("after", delay))...)
			return Held, c.settle(ctx, Held, d.Ack)
		case herr == nil:
			c.stats.duplicates.Add(1) // another delivery of it committed meanwhile
			return Duplicate, c.settle(ctx, Duplicate, d.Ack)
		case ctx.Err() != nil:
			c.stats.abandoned.Add(1)
			return Abandoned, ctx.Err()
		}
		attrs = append(attrs, slog.String("hold_error", herr.Error()))
	}
	c.stats.retried.Add(1)
	c.opts.Logger.Warn("consume: handler failed; the message is delivered again", append(attrs, slog.Duration("after", delay))...)
	return Retried, c.settle(ctx, Retried, func(sctx context.Context) error { return d.Retry(sctx, delay) })
}

// runThroughOutages runs m's transaction until it commits, fails for a
// reason of the message's, or ctx ends. A transaction the database failed
// (see classify) spends no attempt: the delivery waits, as every other one
// the database fails meanwhile, until a probe of the database succeeds,
// then runs again. A lost connection met by the handler is the database's
// only when a probe at once fails too: it may be any server the handler
// calls.
func (c *Consumer) runThroughOutages(ctx context.Context, m *relayer.Message) (res result, err error) {
	for {
		res, err = c.run(ctx, m)
		if err == nil {
			c.outage.committed()
			return res, nil
		}
		if !c.waitedOut(ctx, err) {
			return res, err
		}
	}
}

// waitedOut reports whether err, the error of one of the consumer's
// transactions, was a fault of the database that the consumer then waited
// out: the transaction is to run again, having spent no attempt.
func (c *Consumer) waitedOut(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var own *ownStatement
	switch classify(err, !errors.As(err, &own)) {
	case notFault:
		return false
	case maybeFault:
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		perr := c.check(pctx)
		cancel()
		if perr == nil || ctx.Err() != nil {
			return false
		}
	}
	c.stats.databaseWaits.Add(1)
	return c.outage.wait(ctx, err) == nil
}

// liftTraceContext moves the W3C trace context headers of m, which carry
// the context the producer's outbox stored with it (see package otel), into
// m.TraceParent and m.TraceState, as the outbox stored them. Names match
// without regard to case, as some brokers change it; the last of each
// counts. A message that has its trace context already is left alone.
func liftTraceContext(m *relayer.Message) {
	if m.TraceParent != "" {
		return
	}
	found := false
	for _, h := range m.Headers {
		if strings.EqualFold(h.Name, relayer.HeaderTraceParent) {
			found = true
			break
		}
	}
	if !found {
		return
	}
	kept := m.Headers[:0:0]
	for _, h := range m.Headers {
		switch {
		case strings.EqualFold(h.Name, relayer.HeaderTraceParent):
			m.TraceParent = string(h.Value)
		case strings.EqualFold(h.Name, relayer.HeaderTraceState):
			m.TraceState = string(h.Value)
		default:
			kept = append(kept, h)
		}
	}
	m.Headers = kept
}

// settle runs the broker call that settles a delivery on a context of its
// own, bounded by settleTimeout, so that a consumer that is stopping still
// settles what its transaction decided.
func (c *Consumer) settle(ctx context.Context, o Outcome, call func(context.Context) error) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if err := call(sctx); err != nil {
		c.stats.settleFailures.Add(1)
		return fmt.Errorf("consume: settling a delivery (%s): %w", o, err)
	}
	return nil
}

// inSQLTx runs body in a database/sql transaction on db (begun by the
// writer, when the consumer has one), whose handle runs handler; the
// functions the handler registered with Tx.OnCommit run after the commit.
func (c *Consumer) inSQLTx(ctx context.Context, db *sql.DB, handler Handler, body txBody) (err error) {
	tx := &Tx{}
	if c.opts.Writer != nil {
		if tx.out, err = c.opts.Writer.Begin(ctx, db, c.opts.TxOptions); err != nil {
			return &ownStatement{fmt.Errorf("consume: begin: %w", err)}
		}
		tx.Tx = tx.out.Tx
	} else if tx.Tx, err = db.BeginTx(ctx, c.opts.TxOptions); err != nil {
		return &ownStatement{fmt.Errorf("consume: begin: %w", err)}
	}
	committed := false
	defer func() {
		if !committed {
			tx.rollback()
		}
	}()
	var handled *relayer.Message
	if err := body(tx.Tx, func(ctx context.Context, m *relayer.Message) error {
		handled = m
		registered := len(tx.onCommit)
		err := c.call(m, func() error { return handler(ctx, tx, m) })
		if err != nil {
			// A failure rolled back to a savepoint commits nothing of the
			// handler's: what it registered does not run either.
			tx.onCommit = tx.onCommit[:registered]
		}
		return err
	}); err != nil {
		return err
	}
	if err := tx.commit(); err != nil {
		return &ownStatement{fmt.Errorf("consume: commit: %w", err)}
	}
	committed = true
	for _, f := range tx.onCommit {
		c.afterCommit(handled, f)
	}
	return nil
}

// afterCommit runs a function registered with Tx.OnCommit, logging its
// panic.
func (c *Consumer) afterCommit(m *relayer.Message, f func()) {
	defer func() {
		if p := recover(); p != nil {
			c.opts.Logger.Error("consume: an OnCommit function panicked", slog.String("consumer", c.opts.Name), slog.String("id", m.ID.String()),
				slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
		}
	}()
	f()
}

// call runs the handler, turning a panic into an error so that the message
// is retried and, if it panics every time, dead-lettered rather than
// crashing the consumer at each delivery.
func (c *Consumer) call(m *relayer.Message, handle func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("consume: handler panicked: %v", p)
			c.opts.Logger.Error("consume: handler panicked", slog.String("consumer", c.opts.Name), slog.String("id", m.ID.String()),
				slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
		}
	}()
	return handle()
}

// jittered shortens d by a random part of up to a fifth (see Options.Retry).
func jittered(d time.Duration) time.Duration {
	return d - time.Duration(rand.Int64N(int64(d)/5+1))
}
