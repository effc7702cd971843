package relayerpgx

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
)

// NewConsumer returns a consume.Consumer whose handler gets each message's
// transaction as a pgx.Tx begun on db (a *pgxpool.Pool, a *pgx.Conn): the
// handler's writes (sqlc's queries among them), the inbox record and the
// commit share it. To publish follow-up messages in it, use
// [Writer.NewConsumer]. The consumer's TxOptions map to pgx's: isolation
// (default, read uncommitted, read committed, repeatable read,
// serializable) and read-only; another level is refused with
// consume.ErrInvalidOptions. Errors are otherwise consume.NewTx's.
func NewConsumer(db TxBeginner, handler func(ctx context.Context, tx pgx.Tx, m *relayer.Message) error, opts consume.Options) (*consume.Consumer, error) {
	if db == nil {
		return nil, errors.New("relayerpgx: NewConsumer: nil TxBeginner")
	}
	if _, err := pgxOptions(opts.TxOptions); err != nil {
		return nil, fmt.Errorf("%w: TxOptions: %w", consume.ErrInvalidOptions, err)
	}
	return consume.NewTx(func(ctx context.Context, o *sql.TxOptions) (pgx.Tx, consume.Txn, error) {
		po, err := pgxOptions(o)
		if err != nil {
			return nil, nil, err
		}
		tx, err := db.BeginTx(ctx, po)
		if err != nil {
			return nil, nil, err
		}
		return tx, &pgxTxn{ctx: ctx, exec: tx.Exec, query: tx.Query, commit: tx.Commit, rollback: tx.Rollback}, nil
	}, handler, opts)
}

// NewConsumer returns a consume.Consumer whose handler gets each message's
// transaction as a [Tx] on db, which publishes follow-up messages through
// the writer: they commit with the handler's writes and the inbox record,
// and the writer's listener learns of them after the commit. opts.Tables
// defaults to the writer's tables. Otherwise as the package's
// [NewConsumer].
func (w *Writer) NewConsumer(db TxBeginner, handler func(ctx context.Context, tx *Tx, m *relayer.Message) error, opts consume.Options) (*consume.Consumer, error) {
	if db == nil {
		return nil, errors.New("relayerpgx: NewConsumer: nil TxBeginner")
	}
	if _, err := pgxOptions(opts.TxOptions); err != nil {
		return nil, fmt.Errorf("%w: TxOptions: %w", consume.ErrInvalidOptions, err)
	}
	if opts.Tables.Schema == "" && opts.Tables.TablePrefix == "" {
		opts.Tables = w.w.Tables()
	}
	return consume.NewTx(func(ctx context.Context, o *sql.TxOptions) (*Tx, consume.Txn, error) {
		po, err := pgxOptions(o)
		if err != nil {
			return nil, nil, err
		}
		tx, err := w.Begin(ctx, db, po)
		if err != nil {
			return nil, nil, err
		}
		return tx, &pgxTxn{ctx: ctx, exec: tx.Tx.Exec, query: tx.Tx.Query, commit: tx.Commit, rollback: tx.Rollback}, nil
	}, handler, opts)
}

// pgxOptions maps database/sql's transaction options to pgx's.
func pgxOptions(o *sql.TxOptions) (pgx.TxOptions, error) {
	var po pgx.TxOptions
	if o == nil {
		return po, nil
	}
	switch o.Isolation {
	case sql.LevelDefault:
	case sql.LevelReadUncommitted:
		po.IsoLevel = pgx.ReadUncommitted
	case sql.LevelReadCommitted:
		po.IsoLevel = pgx.ReadCommitted
	case sql.LevelRepeatableRead:
		po.IsoLevel = pgx.RepeatableRead
	case sql.LevelSerializable:
		po.IsoLevel = pgx.Serializable
	default:
		return po, fmt.Errorf("relayerpgx: isolation level %s: PostgreSQL has no such level", o.Isolation)
	}
	if o.ReadOnly {
		po.AccessMode = pgx.ReadOnly
	}
	return po, nil
}

// pgxTxn is a pgx transaction as the consumer records its inbox in it and
// ends it: its statements run through ExecContext, and its reads of the
// held keys through QueryRows (consume.RowQuerier), on pgx's own rows.
type pgxTxn struct {
	ctx      context.Context
	exec     func(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	query    func(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	commit   func(ctx context.Context) error
	rollback func(ctx context.Context) error
}

// QueryRows runs a query of the consumer's in the transaction.
func (t *pgxTxn) QueryRows(ctx context.Context, query string, args ...any) (consume.Rows, error) {
	rows, err := t.query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgxRows{rows}, nil
}

// pgxRows are pgx's rows as consume.Rows: Close reports the rows' error.
type pgxRows struct{ pgx.Rows }

func (r pgxRows) Close() error {
	r.Rows.Close()
	return r.Rows.Err()
}

func (t *pgxTxn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	tag, err := t.exec(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return rowsAffected(tag.RowsAffected()), nil
}

// errNoQueries reports a read through database/sql, which the consumer
// makes through QueryRows instead.
var errNoQueries = errors.New("relayerpgx: the consumer's transaction reads rows through QueryRows, not database/sql")

func (t *pgxTxn) QueryContext(context.Context, string, ...any) (*sql.Rows, error) {
	return nil, errNoQueries
}

// Commit commits with the message's context, as the handler ran with it.
func (t *pgxTxn) Commit() error { return t.commit(t.ctx) }

// Rollback rolls back even when the message's context ended, within a few
// seconds: pgx closes the connection of a rollback it could not send.
func (t *pgxTxn) Rollback() error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), 5*time.Second)
	defer cancel()
	return t.rollback(ctx)
}

// rowsAffected is a statement's result as database/sql reports it.
type rowsAffected int64

func (n rowsAffected) LastInsertId() (int64, error) {
	return 0, errors.New("relayerpgx: PostgreSQL reports no last insert id")
}
func (n rowsAffected) RowsAffected() (int64, error) { return int64(n), nil }
