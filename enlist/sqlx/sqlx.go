// Package relayersqlx enlists outbox messages in sqlx transactions.
//
// [Tx] embeds *sqlx.Tx, so every sqlx and database/sql method keeps its
// meaning; it adds Publish and PublishAll, and its Commit tells the writer's
// listener about the published rows once the commit succeeded:
//
//	w := relayersqlx.NewWriter(writer) // writer is an *enlist.Writer
//	err := w.RunInTx(ctx, db, nil, func(tx *relayersqlx.Tx) error {
//		if _, err := tx.NamedExecContext(ctx, `INSERT INTO orders (id) VALUES (:id)`, order); err != nil {
//			return err
//		}
//		return tx.Publish(ctx, OrderPlaced{ID: order.ID}, relayer.Key(order.Customer))
//	})
//
// Outbox rows are written through the transaction's *sql.Tx with PostgreSQL
// placeholders, independent of the sqlx bind type.
package relayersqlx

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
)

// Writer begins and wraps sqlx transactions for an [enlist.Writer].
type Writer struct {
	w *enlist.Writer
}

// NewWriter returns a Writer publishing through w.
func NewWriter(w *enlist.Writer) *Writer { return &Writer{w: w} }

// Tx is a *sqlx.Tx that can publish; commit it through Tx. The outbox side
// is an [enlist.Tx] on the same *sql.Tx, so publishing, Commit and Rollback
// mean exactly what they mean there.
type Tx struct {
	*sqlx.Tx
	out *enlist.Tx
}

// Beginx starts a transaction on db, as [sqlx.DB.BeginTxx] does; ctx bounds the
// whole transaction.
func (w *Writer) Beginx(ctx context.Context, db *sqlx.DB, opts *sql.TxOptions) (*Tx, error) {
	if db == nil {
		return nil, errors.New("relayersqlx: Beginx: nil *sqlx.DB")
	}
	tx, err := db.BeginTxx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return w.Wrap(tx), nil
}

// Wrap returns tx, a transaction the caller already began, ready for
// publishing.
func (w *Writer) Wrap(tx *sqlx.Tx) *Tx {
	var sqlTx *sql.Tx
	if tx != nil {
		sqlTx = tx.Tx
	}
	return &Tx{Tx: tx, out: w.w.Wrap(sqlTx)}
}

// RunInTx runs fn in a transaction on db: committed when fn returns nil, rolled
// back when it returns an error or panics.
func (w *Writer) RunInTx(ctx context.Context, db *sqlx.DB, opts *sql.TxOptions, fn func(tx *Tx) error) error {
	tx, err := w.Beginx(ctx, db, opts)
	if err != nil {
		return err
	}
	return enlist.RunTx(tx, fn)
}

// Publish writes one message in the transaction: one round trip.
func (t *Tx) Publish(ctx context.Context, msg any, opts ...relayer.Option) error {
	return t.PublishAll(ctx, relayer.NewOutgoing(msg, opts...))
}

// PublishAll writes several messages in the transaction in one round trip.
func (t *Tx) PublishAll(ctx context.Context, msgs ...relayer.Outgoing) error {
	if t == nil {
		return fmt.Errorf("%w: nil transaction", relayer.ErrNotInTransaction)
	}
	return t.out.PublishAll(ctx, msgs...)
}

// Commit commits and then hands the published rows to the writer's listener.
func (t *Tx) Commit() error { return t.out.Commit() }

// Rollback rolls back; nothing is notified.
func (t *Tx) Rollback() error { return t.out.Rollback() }
