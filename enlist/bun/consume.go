package relayerbun

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"

	"github.com/uptrace/bun"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
)

// NewConsumer returns a consume.Consumer whose handler gets each message's
// transaction as a bun.Tx begun on db: the handler's writes, the inbox
// record and the commit share it. With the relayerbun hook on db
// ([NewHook]), the transaction is begun as [BeginTx] begins it, and the
// handler publishes follow-up messages in it with [Publish], which commit
// with it. Hand the consumer to a broker's consume adapter. Errors are
// consume.NewTx's.
func NewConsumer(db *bun.DB, handler func(ctx context.Context, tx bun.Tx, m *relayer.Message) error, opts consume.Options) (*consume.Consumer, error) {
	if db == nil {
		return nil, errors.New("relayerbun: NewConsumer: nil *bun.DB")
	}
	var noHook atomic.Bool // learnt at the first transaction
	return consume.NewTx(func(ctx context.Context, o *sql.TxOptions) (bun.Tx, consume.Txn, error) {
		if !noHook.Load() {
			tx, err := BeginTx(ctx, db, o)
			if err == nil {
				return tx, bunTxn{Tx: tx.Tx, bun: tx}, nil
			}
			if !errors.Is(err, errNoHook) {
				return bun.Tx{}, nil, err
			}
			noHook.Store(true)
		}
		tx, err := db.BeginTx(ctx, o)
		if err != nil {
			return bun.Tx{}, nil, err
		}
		return tx, bunTxn{Tx: tx.Tx, bun: tx}, nil
	}, handler, opts)
}

// bunTxn is a bun transaction as the consumer records its inbox in it,
// through the *sql.Tx under it (bun's own ExecContext reads $n as its own
// placeholders), and ends it through bun, whose hooks see the end.
type bunTxn struct {
	*sql.Tx
	bun bun.Tx
}

func (t bunTxn) Commit() error   { return t.bun.Commit() }
func (t bunTxn) Rollback() error { return t.bun.Rollback() }
