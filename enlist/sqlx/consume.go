package relayersqlx

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jmoiron/sqlx"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
)

// NewConsumer returns a consume.Consumer whose handler gets each message's
// transaction as a *sqlx.Tx on db: the handler's writes, the inbox record
// and the commit share it. Hand the consumer to a broker's consume adapter.
// To publish follow-up messages in that transaction, use
// [Writer.NewConsumer]. Errors are consume.NewTx's.
func NewConsumer(db *sqlx.DB, handler func(ctx context.Context, tx *sqlx.Tx, m *relayer.Message) error, opts consume.Options) (*consume.Consumer, error) {
	if db == nil {
		return nil, errors.New("relayersqlx: NewConsumer: nil *sqlx.DB")
	}
	return consume.NewTx(func(ctx context.Context, o *sql.TxOptions) (*sqlx.Tx, consume.Txn, error) {
		tx, err := db.BeginTxx(ctx, o)
		if err != nil {
			return nil, nil, err
		}
		return tx, tx, nil
	}, handler, opts)
}

// NewConsumer returns a consume.Consumer whose handler gets each message's
// transaction as a [Tx] on db, which publishes follow-up messages through
// the writer: they commit with the handler's writes and the inbox record,
// and the writer's listener learns of them after the commit. opts.Tables
// defaults to the writer's tables. Errors are consume.NewTx's.
func (w *Writer) NewConsumer(db *sqlx.DB, handler func(ctx context.Context, tx *Tx, m *relayer.Message) error, opts consume.Options) (*consume.Consumer, error) {
	if db == nil {
		return nil, errors.New("relayersqlx: NewConsumer: nil *sqlx.DB")
	}
	if opts.Tables.Schema == "" && opts.Tables.TablePrefix == "" {
		opts.Tables = w.w.Tables()
	}
	return consume.NewTx(func(ctx context.Context, o *sql.TxOptions) (*Tx, consume.Txn, error) {
		tx, err := w.Beginx(ctx, db, o)
		if err != nil {
			return nil, nil, err
		}
		return tx, tx, nil
	}, handler, opts)
}
