package relayergorm

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
)

// NewConsumer returns a consume.Consumer whose handler gets each message's
// transaction as a *gorm.DB begun on db: the handler's writes, the inbox
// record and the commit share it. With the relayergorm [Plugin] installed
// on db, the handler publishes follow-up messages in that transaction with
// [Publish] (or a model's recorded messages), and they commit with it.
// Hand the consumer to a broker's consume adapter. Errors are
// consume.NewTx's.
func NewConsumer(db *gorm.DB, handler func(ctx context.Context, tx *gorm.DB, m *relayer.Message) error, opts consume.Options) (*consume.Consumer, error) {
	if db == nil {
		return nil, errors.New("relayergorm: NewConsumer: nil *gorm.DB")
	}
	return consume.NewTx(func(ctx context.Context, o *sql.TxOptions) (*gorm.DB, consume.Txn, error) {
		tx := db.WithContext(ctx).Begin(o)
		if tx.Error != nil {
			return nil, nil, tx.Error
		}
		return tx, gormTxn{tx}, nil
	}, handler, opts)
}

// gormTxn is a GORM transaction as the consumer records its inbox in it and
// ends it.
type gormTxn struct{ tx *gorm.DB }

func (t gormTxn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return t.tx.Statement.ConnPool.ExecContext(ctx, query, args...)
}

func (t gormTxn) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return t.tx.Statement.ConnPool.QueryContext(ctx, query, args...)
}

func (t gormTxn) Commit() error {
	if err := t.tx.Commit().Error; err != nil {
		return fmt.Errorf("relayergorm: %w", err)
	}
	return nil
}

func (t gormTxn) Rollback() error { return t.tx.Rollback().Error }
