package enlist

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
	"github.com/relayer-go/relayer/internal/storesql"
	"github.com/relayer-go/relayer/internal/storewrite"
	"github.com/relayer-go/relayer/store"
)

// ErrStoreMismatch is returned by [NewWriter] when the listener serves an outbox
// whose schema or table prefix differs from the writer's.
var ErrStoreMismatch = errors.New("enlist: listener serves another outbox")

// ErrInvalidOptions is returned by [NewWriter] for an option out of range.
var ErrInvalidOptions = errors.New("enlist: invalid options")

// CommitListener receives the rows of each committed transaction; the direct
// dispatcher is one. Committed is called after the outermost commit returned
// success, never after a rollback, on the goroutine that committed: it must not
// block on I/O. Ownership of rows (the messages and their body and header
// buffers) passes to the listener.
//
// A listener may receive the id of a row that a rolled-back savepoint removed;
// it must not send a notified row that no longer exists in the table.
type CommitListener interface {
	// Tables returns the schema and prefix of the outbox the listener
	// serves, with defaults applied. The writer refuses a listener of another
	// outbox.
	Tables() store.Tables
	// Committed takes the rows. When it cannot (its queue is full, it has
	// stopped) it returns an error; the rows are durable and recovery sends them.
	// An error with a PendingRows() int method says how many of the rows were
	// left (a listener may have had no use for some, such as ordered rows);
	// otherwise all of them count as left.
	Committed(rows []relayer.Message) error
}

// Options configure a [Writer].
type Options struct {
	// Listener is told about committed rows. Default: none, the writer only
	// enlists and recovery delivers.
	Listener CommitListener
	// Logger receives warnings about committed rows a listener did not take.
	// Default: slog.Default().
	Logger *slog.Logger
	// Wake turns on the wake-up across processes when set: after a commit
	// that left rows for workers — a due ordered row, or a due unordered
	// row that no direct dispatcher of this process took — the writer sends
	// one NOTIFY without a payload on the outbox's channel
	// ([store.Tables.WakeChannel]) through this pool, outside the
	// transaction and off the committing goroutine, and workers that listen
	// (dispatch.RunnerOptions.Listen) scan at once instead of at their
	// poll. A NOTIFY that fails is logged; the workers' poll finds the rows.
	// Each NOTIFY is a short transaction of its own, and PostgreSQL
	// serializes notifying commits: WakeInterval bounds their rate.
	// Default: nil, off.
	Wake *sql.DB
	// WakeInterval is the least time between two NOTIFYs of this writer,
	// 1 ms to 1 s: the first commit after a quiet interval notifies at once,
	// and the commits within an interval share one NOTIFY at its end.
	// Default: 5 ms. It applies only with Wake.
	WakeInterval time.Duration
	// RefuseNewerSchema makes publishing fail (with store.ErrSchemaNewer)
	// when the outbox's tables record a migration newer than this release
	// knows. The writer checks the schema once, in the transaction of its
	// first publish: an outdated schema (store.ErrSchemaOutdated, with how
	// to migrate) always fails it; a newer one, which a newer release
	// migrated during a rolling deploy and this one can still write to, is
	// accepted unless this is set (the workers, which read it, warn).
	// Default: false.
	RefuseNewerSchema bool
}

// Validate reports the first field out of range.
func (o Options) Validate() error {
	if o.WakeInterval != 0 && (o.WakeInterval < WakeIntervalMin || o.WakeInterval > WakeIntervalMax) {
		return fmt.Errorf("%w: WakeInterval must be %s to %s, got %s", ErrInvalidOptions, WakeIntervalMin, WakeIntervalMax, o.WakeInterval)
	}
	return nil
}

// Writer turns message values into outbox rows written inside the caller's
// transaction, and tells its listener about them after commit. It is safe for
// concurrent use; each transaction has its own [Enlistment].
type Writer struct {
	// tables names the outbox's tables, the defaults applied.
	tables store.Tables
	// stmts are the writer statements on them.
	stmts       storewrite.Statements
	routes      *relayer.Routes
	serializer  relayer.Serializer
	lanes       int
	trace       func(context.Context) (string, string)
	contentType []byte
	listener    CommitListener
	logger      *slog.Logger
	left        atomic.Uint64
	refuseNewer bool
	// schemaChecked is set once a publish found the schema current.
	schemaChecked atomic.Bool
	notifier      *notifier // nil unless Options.Wake is set
}

// NewWriter validates outbox and opts and returns a writer. It does not touch
// the database. Its errors wrap a sentinel for [errors.Is]:
// [ErrInvalidOptions] for an option out of range in opts;
// [store.ErrInvalidOptions] for a schema or table prefix that is not a valid
// identifier; [relayer.ErrInvalidOutbox] when outbox is unusable (a lane
// count out of range, a nil transport, a retry policy out of range);
// [relayer.ErrInvalidRoute] when it routes no message type; and
// [ErrStoreMismatch] when opts.Listener serves another outbox.
func NewWriter(outbox relayer.Outbox, opts Options) (*Writer, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	tables := store.TablesOf(outbox)
	stmts, err := storewrite.For(tables.Schema, tables.TablePrefix)
	if err != nil {
		return nil, err
	}
	tables.Schema = stmts.Schema
	if err := outbox.Validate(); err != nil {
		return nil, fmt.Errorf("enlist: %w", err)
	}
	if outbox.Routes == nil || outbox.Routes.Len() == 0 {
		return nil, fmt.Errorf("%w: Outbox.Routes is empty", relayer.ErrInvalidRoute)
	}
	outbox = outbox.WithDefaults()
	w := &Writer{
		tables:      tables,
		stmts:       stmts,
		routes:      outbox.Routes.Clone(),
		serializer:  outbox.Serializer,
		lanes:       outbox.Lanes,
		trace:       outbox.TraceContext,
		listener:    opts.Listener,
		logger:      opts.Logger,
		refuseNewer: opts.RefuseNewerSchema,
	}
	if w.logger == nil {
		w.logger = slog.Default()
	}
	w.contentType = []byte(w.serializer.ContentType())
	if opts.Wake != nil {
		interval := opts.WakeInterval
		if interval == 0 {
			interval = WakeIntervalDefault
		}
		if w.notifier, err = newNotifier(opts.Wake, tables, interval, w.logger); err != nil {
			return nil, err
		}
	}
	if w.listener != nil {
		if got, want := w.listener.Tables(), tables; got != want {
			return nil, fmt.Errorf("%w: listener serves schema %q prefix %q, writer writes schema %q prefix %q",
				ErrStoreMismatch, got.Schema, got.TablePrefix, want.Schema, want.TablePrefix)
		}
	}
	if named := w.routes.GoNamed(); len(named) > 0 {
		w.logger.Warn("enlist: message types named after their Go package and type; renaming either changes the type consumers receive: give each a MessageType method (relayer.Typer)",
			slog.Any("types", named))
	}
	return w, nil
}

// Tables returns the schema and prefix the writer writes to.
func (w *Writer) Tables() store.Tables { return w.tables }

// WakeUps returns how many wake-up NOTIFYs the writer has sent (see
// Options.Wake).
func (w *Writer) WakeUps() uint64 {
	if w.notifier == nil {
		return 0
	}
	return w.notifier.notified()
}

// LeftForRecovery returns how many committed rows the listener did not take
// since the writer was made. Recovery delivers them.
func (w *Writer) LeftForRecovery() uint64 { return w.left.Load() }

// Enlist starts the outbox side of one transaction. Data-layer adapters call it
// when a transaction begins (or at its first publish), then [Enlistment.Publish]
// for each batch of messages, and [Enlistment.Committed] or
// [Enlistment.RolledBack] when the outermost transaction ends.
func (w *Writer) Enlist() *Enlistment { return &Enlistment{w: w} }

// build turns one outgoing value into a row. Nothing is written.
func (w *Writer) build(ctx context.Context, out *relayer.Outgoing, now time.Time, traceParent, traceState string) (relayer.Message, error) {
	if out.Message == nil {
		return relayer.Message{}, fmt.Errorf("%w: nil message", relayer.ErrInvalidMessage)
	}
	typ := relayer.TypeOf(out.Message)
	route, err := w.routes.Lookup(typ)
	if err != nil {
		return relayer.Message{}, fmt.Errorf("%w: %w", relayer.ErrInvalidMessage, err)
	}
	if route.Ordered && out.Key == "" {
		return relayer.Message{}, fmt.Errorf("%w: type %q has an ordered route and needs an ordering key (relayer.Key)", relayer.ErrInvalidMessage, typ)
	}
	if len(out.Key) > relayer.KeyMaxBytes {
		return relayer.Message{}, fmt.Errorf("%w: type %q: ordering key is %d bytes, over the limit of %d (relayer.KeyMaxBytes)", relayer.ErrInvalidMessage, typ, len(out.Key), relayer.KeyMaxBytes)
	}
	if !utf8.ValidString(out.Key) {
		return relayer.Message{}, fmt.Errorf("%w: type %q: ordering key is not valid UTF-8", relayer.ErrInvalidMessage, typ)
	}
	for i, h := range out.Headers {
		if !utf8.ValidString(h.Name) {
			return relayer.Message{}, fmt.Errorf("%w: type %q: header %d: name %q is not valid UTF-8", relayer.ErrInvalidMessage, typ, i, h.Name)
		}
	}
	body, err := w.serializer.Marshal(out.Message)
	if err != nil {
		return relayer.Message{}, fmt.Errorf("%w: type %q: serialize: %w", relayer.ErrInvalidMessage, typ, err)
	}
	id := out.ID
	if id == uuid.Nil {
		if id, err = relayer.NewID(); err != nil {
			return relayer.Message{}, fmt.Errorf("enlist: new message id: %w", err)
		}
	}
	// The header values are copied into one block: the caller may reuse its
	// buffers once Publish returns, while the dispatcher still sends (and may
	// write back) these bytes after the commit.
	hs := make([]headers.Header, 0, 1+len(out.Headers))
	hs = append(hs, headers.Header{Name: relayer.HeaderContentType, Value: w.contentType})
	size := 0
	for _, h := range out.Headers {
		size += len(h.Value)
	}
	block := make([]byte, 0, size)
	for _, h := range out.Headers {
		start := len(block)
		block = append(block, h.Value...)
		hs = append(hs, headers.Header{Name: h.Name, Value: block[start:len(block):len(block)]})
	}
	m := relayer.Message{
		ID:          id,
		Type:        typ,
		Body:        body,
		Headers:     hs,
		Transport:   route.Transport,
		Destination: route.Destination,
		Key:         out.Key,
		CreatedAt:   now,
		TraceParent: traceParent,
		TraceState:  traceState,
	}
	if !out.DeliverAt.IsZero() {
		m.DeliverAt = out.DeliverAt.UTC().Truncate(time.Microsecond)
	}
	if route.Ordered {
		m.Ordered = true
		m.Lane, _ = relayer.Lane(out.Key, w.lanes) // the count was validated in NewWriter
	}
	return m, nil
}

// buildAll turns msgs into rows, stopping at the first invalid one.
func (w *Writer) buildAll(ctx context.Context, msgs []relayer.Outgoing) ([]relayer.Message, error) {
	var traceParent, traceState string
	if w.trace != nil {
		traceParent, traceState = w.trace(ctx)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	rows := make([]relayer.Message, len(msgs))
	for i := range msgs {
		var err error
		if rows[i], err = w.build(ctx, &msgs[i], now, traceParent, traceState); err != nil {
			if len(msgs) > 1 {
				return nil, fmt.Errorf("message %d: %w", i, err)
			}
			return nil, err
		}
	}
	return rows, nil
}

// Validate checks msgs as publishing them would (route, ordering key,
// serialization, and every stored field), writing nothing and keeping
// nothing: it returns the error [Enlistment.Publish] would return for an
// invalid message, wrapping [relayer.ErrInvalidMessage], or nil. Adapters call
// it before a business statement runs, so that a message that would be
// refused after the statement does not leave the statement's rows to commit
// without it. Each message is serialized, so a later Publish serializes it
// again.
func (w *Writer) Validate(ctx context.Context, msgs ...relayer.Outgoing) error {
	rows, err := w.buildAll(ctx, msgs)
	if err != nil {
		return err
	}
	if err := store.Validate(rows); err != nil {
		return fmt.Errorf("%w: %w", relayer.ErrInvalidMessage, err)
	}
	return nil
}

// Enlistment is the outbox side of one database transaction: the rows written
// in it, held until the transaction ends. It is safe for concurrent use.
type Enlistment struct {
	w     *Writer
	mu    sync.Mutex
	rows  []relayer.Message
	ended bool
}

// Publish serializes msgs, writes them on q — the transaction's connection — in
// one statement, and keeps them for the after-commit notification. Every message
// is validated first; if one is invalid nothing is written and the error wraps
// [relayer.ErrInvalidMessage]. After the enlistment ended it returns
// [relayer.ErrNotInTransaction].
func (e *Enlistment) Publish(ctx context.Context, q store.DBTX, msgs ...relayer.Outgoing) error {
	if storesql.IsNil(q) {
		return fmt.Errorf("%w: %w", relayer.ErrNotInTransaction, store.ErrNilDB)
	}
	return e.PublishWith(ctx, func(ctx context.Context, query string, args ...any) error {
		_, err := q.ExecContext(ctx, query, args...)
		return err
	}, msgs...)
}

// ExecFunc runs one statement with its arguments on a transaction's
// connection and reports whether it succeeded: how [Enlistment.PublishWith]
// writes through drivers that are not database/sql drivers, such as pgx's
// native interface.
type ExecFunc func(ctx context.Context, query string, args ...any) error

// PublishWith is [Enlistment.Publish] for transactions of drivers that are not
// database/sql drivers: exec runs the insert on the transaction's connection.
// The rows written are the same, byte for byte.
func (e *Enlistment) PublishWith(ctx context.Context, exec ExecFunc, msgs ...relayer.Outgoing) error {
	if exec == nil {
		return fmt.Errorf("%w: nil exec function", relayer.ErrNotInTransaction)
	}
	if e.isEnded() {
		return fmt.Errorf("%w: the transaction has ended", relayer.ErrNotInTransaction)
	}
	if len(msgs) == 0 {
		return nil
	}
	rows, err := e.w.buildAll(ctx, msgs)
	if err != nil {
		return err
	}
	if !e.w.schemaChecked.Load() {
		if err := e.w.stmts.CheckSchema(ctx, storewrite.ExecFunc(exec), e.w.refuseNewer); err != nil {
			return fmt.Errorf("enlist: %w", err)
		}
		if err := e.w.stmts.CheckLaneCount(ctx, storewrite.ExecFunc(exec), e.w.lanes); err != nil {
			return fmt.Errorf("enlist: %w", err)
		}
		e.w.schemaChecked.Store(true)
	}
	if err := e.w.stmts.Insert(ctx, storewrite.ExecFunc(exec), rows); err != nil {
		if errors.Is(err, store.ErrInvalidMessage) {
			return fmt.Errorf("%w: %w", relayer.ErrInvalidMessage, err)
		}
		return fmt.Errorf("enlist: %w", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ended {
		// The transaction ended while the rows were being written: whether they
		// committed is unknown here, and recovery will find them if they did.
		return fmt.Errorf("%w: the transaction ended during publish", relayer.ErrNotInTransaction)
	}
	e.rows = append(e.rows, rows...)
	return nil
}

func (e *Enlistment) isEnded() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ended
}

// Len returns the number of rows written so far.
func (e *Enlistment) Len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.rows)
}

// end marks the enlistment ended and returns its rows, once.
func (e *Enlistment) end() ([]relayer.Message, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ended {
		return nil, false
	}
	e.ended = true
	rows := e.rows
	e.rows = nil
	return rows, true
}

// Committed ends the enlistment after the outermost commit succeeded and hands
// its rows to the listener. It never fails: rows the listener does not take are
// committed and left to recovery, which is logged and counted (see
// [Writer.LeftForRecovery]). Calls after the first do nothing.
func (e *Enlistment) Committed() {
	rows, first := e.end()
	if !first || len(rows) == 0 {
		return
	}
	var ordered, unordered bool
	var from uuid.UUID
	if e.w.notifier != nil { // before the rows belong to the listener
		ordered, unordered, from = dueRows(rows)
	}
	var err error
	if e.w.listener != nil {
		err = e.w.listener.Committed(rows)
	}
	if e.w.notifier != nil && wakes(ordered, unordered, e.w.listener, err) {
		e.w.notifier.request(from)
	}
	if err != nil {
		left := len(rows)
		var pending interface{ PendingRows() int }
		if errors.As(err, &pending) {
			left = pending.PendingRows()
		}
		e.w.left.Add(uint64(left))
		// The error as a value: it is formatted only by a handler that
		// logs the record, not at every commit of an overloaded process
		// whose logger drops warnings.
		e.w.logger.Warn("enlist: committed rows left for recovery",
			slog.Int("rows", left), slog.Any("error", err))
	}
}

// dropped reports an enlistment whose transaction value was garbage collected
// while it still held published rows: its transaction was ended some other
// way than through the wrapper's Commit or Rollback (most often a commit
// through the embedded *sql.Tx), so the listener was never told.
func (e *Enlistment) dropped() {
	e.mu.Lock()
	n, ended := len(e.rows), e.ended
	e.mu.Unlock()
	if ended || n == 0 {
		return
	}
	e.w.logger.Warn("enlist: a transaction that published messages was dropped without Commit or Rollback on the enlist.Tx; "+
		"if it committed through the embedded *sql.Tx, direct dispatch never heard of them and recovery sends them later: commit with tx.Commit()",
		slog.Int("rows", n))
}

// RolledBack ends the enlistment without notifying: the rows are gone with the
// transaction. Calls after the first do nothing.
func (e *Enlistment) RolledBack() {
	e.end()
}
