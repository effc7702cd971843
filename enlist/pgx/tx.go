package relayerpgx

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
)

// TxBeginner begins transactions: *pgxpool.Pool and *pgx.Conn are ones.
type TxBeginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Writer begins and wraps pgx transactions for an [enlist.Writer]. It is safe
// for concurrent use.
type Writer struct {
	w *enlist.Writer
}

// NewWriter returns a Writer publishing through w.
func NewWriter(w *enlist.Writer) *Writer { return &Writer{w: w} }

// Tx is a pgx.Tx that can publish. Commit and Rollback it through Tx: its
// Commit tells the writer's listener about the published rows after the
// outermost commit succeeded. Begin starts a savepoint that is a Tx too,
// sharing the outermost transaction's messages, so [pgx.BeginFunc] and
// code that takes a pgx.Tx keep working. Like a pgx.Tx, a Tx is not safe
// for concurrent use.
type Tx struct {
	pgx.Tx
	e *enlist.Enlistment
	// outer is the outermost Tx, nil for the outermost itself.
	outer *Tx
}

// Begin starts a transaction on db for publishing. As with pgx, ctx bounds
// the BEGIN only; give Commit a context of its own.
func (w *Writer) Begin(ctx context.Context, db TxBeginner, opts pgx.TxOptions) (*Tx, error) {
	if db == nil {
		return nil, errors.New("relayerpgx: Begin: nil TxBeginner")
	}
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return w.Wrap(tx), nil
}

// Wrap returns tx, an outermost transaction the caller already began, ready
// for publishing. Commit it through the returned Tx; a savepoint must not be
// wrapped (begin it from the Tx instead), since its commit is not the one
// after which the rows are durable.
func (w *Writer) Wrap(tx pgx.Tx) *Tx {
	t := &Tx{Tx: tx, e: w.w.Enlist()}
	enlist.ReportDropped(t, t.e)
	return t
}

// RunInTx runs fn in a transaction on db and commits it when fn returns nil.
// It rolls back when fn returns an error (returned as is) or panics (the
// panic continues after the rollback).
func (w *Writer) RunInTx(ctx context.Context, db TxBeginner, opts pgx.TxOptions, fn func(tx *Tx) error) error {
	tx, err := w.Begin(ctx, db, opts)
	if err != nil {
		return err
	}
	return run(ctx, tx, fn)
}

// run runs fn with tx, then commits tx when fn returned nil, rolling it back
// otherwise.
func run(ctx context.Context, tx *Tx, fn func(tx *Tx) error) error {
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback(ctx)
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	committed = true
	return tx.Commit(ctx)
}

// Publish writes one message in the transaction: one round trip.
func (t *Tx) Publish(ctx context.Context, msg any, opts ...relayer.Option) error {
	return t.PublishAll(ctx, relayer.NewOutgoing(msg, opts...))
}

// PublishAll writes several messages in the transaction in one round trip.
// If one is invalid nothing is written and the error wraps
// [relayer.ErrInvalidMessage]; after the outermost transaction ended it
// returns [relayer.ErrNotInTransaction].
func (t *Tx) PublishAll(ctx context.Context, msgs ...relayer.Outgoing) error {
	if t == nil || t.Tx == nil {
		return fmt.Errorf("%w: nil transaction", relayer.ErrNotInTransaction)
	}
	return t.e.PublishWith(ctx, t.exec, msgs...)
}

func (t *Tx) exec(ctx context.Context, query string, args ...any) error {
	_, err := t.Tx.Exec(ctx, query, args...)
	return err
}

// Begin starts a savepoint in the transaction and returns it as a *Tx that
// publishes into the same outermost transaction. Rows published in a
// savepoint that is rolled back are gone with it; the listener may still be
// told their ids, and never sends a row that is not in the table.
func (t *Tx) Begin(ctx context.Context) (pgx.Tx, error) {
	sp, err := t.Tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &Tx{Tx: sp, e: t.e, outer: t.outermost()}, nil
}

// RunInTx runs fn in a savepoint of the transaction: released when fn
// returns nil, rolled back to when it returns an error (returned as is) or
// panics (the panic continues). The outermost transaction goes on either way.
func (t *Tx) RunInTx(ctx context.Context, fn func(tx *Tx) error) error {
	sp, err := t.Begin(ctx)
	if err != nil {
		return err
	}
	return run(ctx, sp.(*Tx), fn)
}

func (t *Tx) outermost() *Tx {
	if t.outer != nil {
		return t.outer
	}
	return t
}

// Nested reports whether t is a savepoint rather than the outermost
// transaction.
func (t *Tx) Nested() bool { return t.outer != nil }

// Commit commits the transaction. For the outermost transaction, when that
// succeeded, it hands the published rows to the writer's listener, which
// never makes Commit fail; for a savepoint it releases the savepoint.
func (t *Tx) Commit(ctx context.Context) error {
	err := t.Tx.Commit(ctx)
	if t.outer != nil {
		return err
	}
	if err != nil {
		// Whether a COMMIT whose reply was lost took effect is unknown here;
		// if it did, recovery sends the rows.
		t.e.RolledBack()
		return err
	}
	t.e.Committed()
	return nil
}

// Rollback rolls the transaction (or the savepoint) back; nothing is
// notified. As with pgx, rolling back a transaction that has ended returns
// pgx.ErrTxClosed.
func (t *Tx) Rollback(ctx context.Context) error {
	err := t.Tx.Rollback(ctx)
	if t.outer == nil {
		t.e.RolledBack()
	}
	return err
}

// Publish publishes one message in tx, a *Tx or a savepoint begun from one
// (such as the pgx.Tx that [pgx.BeginFunc] passes on); other transactions
// return [relayer.ErrNotInTransaction].
func Publish(ctx context.Context, tx pgx.Tx, msg any, opts ...relayer.Option) error {
	return PublishAll(ctx, tx, relayer.NewOutgoing(msg, opts...))
}

// PublishAll publishes several messages in tx in one round trip; see
// [Publish].
func PublishAll(ctx context.Context, tx pgx.Tx, msgs ...relayer.Outgoing) error {
	t, ok := tx.(*Tx)
	if !ok {
		return fmt.Errorf("%w: %T is not a relayerpgx.Tx: begin the transaction with Writer.Begin or Writer.RunInTx, or wrap it with Writer.Wrap",
			relayer.ErrNotInTransaction, tx)
	}
	return t.PublishAll(ctx, msgs...)
}
