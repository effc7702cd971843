package enlist

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"

	"github.com/relayer-go/relayer"
)

// Tx is a *sql.Tx whose commit notifies the writer's listener. It embeds the
// *sql.Tx, so every method of database/sql keeps its meaning; Commit and
// Rollback do what the embedded ones do, then end the outbox side of the
// transaction. Commit through Tx, not through the embedded *sql.Tx, or the
// listener is not told (the rows are still committed, and recovery sends them
// later). A Tx that published messages and is garbage collected without its
// Commit or Rollback having been called is logged as a warning that names
// the fix.
type Tx struct {
	*sql.Tx
	e *Enlistment
}

// Begin starts a transaction on db for publishing. ctx bounds the whole
// transaction, as with [sql.DB.BeginTx]: when it is done before Commit, the
// transaction rolls back.
func (w *Writer) Begin(ctx context.Context, db *sql.DB, opts *sql.TxOptions) (*Tx, error) {
	if db == nil {
		return nil, errors.New("enlist: Begin: nil *sql.DB")
	}
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return w.Wrap(tx), nil
}

// Wrap returns tx, a transaction the caller already began, ready for
// publishing. Commit it through the returned Tx.
func (w *Writer) Wrap(tx *sql.Tx) *Tx {
	t := &Tx{Tx: tx, e: w.Enlist()}
	ReportDropped(t, t.e)
	return t
}

// ReportDropped makes the writer log a warning if tx, a transaction wrapper
// that owns e, is garbage collected while e still holds published rows: the
// transaction was then ended around the wrapper (for example by committing the
// *sql.Tx it embeds), and the listener was never told. Adapters call it for
// their own wrapper types; e must not reference tx.
func ReportDropped[T any](tx *T, e *Enlistment) {
	runtime.AddCleanup(tx, (*Enlistment).dropped, e)
}

// Publish writes one message in the transaction: one round trip.
func (t *Tx) Publish(ctx context.Context, msg any, opts ...relayer.Option) error {
	return t.PublishAll(ctx, relayer.NewOutgoing(msg, opts...))
}

// PublishAll writes several messages in the transaction in one round trip.
func (t *Tx) PublishAll(ctx context.Context, msgs ...relayer.Outgoing) error {
	if t == nil || t.Tx == nil {
		return fmt.Errorf("%w: nil transaction", relayer.ErrNotInTransaction)
	}
	return t.e.Publish(ctx, t.Tx, msgs...)
}

// Commit commits the transaction and, when that succeeded, hands the published
// rows to the writer's listener. The listener never makes Commit fail.
func (t *Tx) Commit() error {
	err := t.Tx.Commit()
	if err != nil {
		t.e.RolledBack()
		return err
	}
	t.e.Committed()
	return nil
}

// Rollback rolls the transaction back; nothing is notified.
func (t *Tx) Rollback() error {
	err := t.Tx.Rollback()
	t.e.RolledBack()
	return err
}

// RunInTx runs fn in a transaction on db and commits it when fn returns nil. It
// rolls back when fn returns an error (returned as is) or panics (the panic
// continues after the rollback).
func (w *Writer) RunInTx(ctx context.Context, db *sql.DB, opts *sql.TxOptions, fn func(tx *Tx) error) (err error) {
	tx, err := w.Begin(ctx, db, opts)
	if err != nil {
		return err
	}
	return RunTx(tx, fn)
}

// Committer is a transaction that ends with Commit or Rollback.
type Committer interface {
	Commit() error
	Rollback() error
}

// RunTx runs fn with tx, then commits tx when fn returned nil. It rolls tx back
// when fn returns an error (returned as is) or panics (the panic continues after
// the rollback). Adapters whose transaction types wrap [Tx] share it.
func RunTx[T Committer](tx T, fn func(tx T) error) (err error) {
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	committed = true
	return tx.Commit()
}
