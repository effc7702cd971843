package relayergorm

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
)

// connPool wraps the connection pool GORM runs statements on. Statements pass
// through unchanged; transactions it begins are [txConn]s, whose Commit is the
// only place where "after commit" can be observed: database/sql has no commit
// hook, and GORM's own callbacks run before an explicit transaction commits.
type connPool struct {
	gorm.ConnPool
	w *enlist.Writer
}

// wrapPool returns inner wrapped, or an error when inner cannot begin
// transactions or is wrapped already.
func wrapPool(inner gorm.ConnPool, w *enlist.Writer) (*connPool, error) {
	switch inner.(type) {
	case nil:
		return nil, errors.New("relayergorm: the *gorm.DB has no connection pool; open it with gorm.Open before installing the plugin")
	case *connPool:
		return nil, errors.New("relayergorm: the plugin is already installed on this connection pool")
	case gorm.TxBeginner, gorm.ConnPoolBeginner:
		return &connPool{ConnPool: inner, w: w}, nil
	default:
		return nil, fmt.Errorf("relayergorm: the connection pool %T cannot begin transactions", inner)
	}
}

// BeginTx implements gorm.ConnPoolBeginner. ctx bounds the whole transaction,
// as with [sql.DB.BeginTx].
func (p *connPool) BeginTx(ctx context.Context, opts *sql.TxOptions) (gorm.ConnPool, error) {
	var tx gorm.Tx
	switch b := p.ConnPool.(type) {
	case gorm.TxBeginner:
		sqlTx, err := b.BeginTx(ctx, opts)
		if err != nil {
			return nil, err
		}
		tx = sqlTx
	case gorm.ConnPoolBeginner:
		conn, err := b.BeginTx(ctx, opts)
		if err != nil {
			return nil, err
		}
		var ok bool
		if tx, ok = conn.(gorm.Tx); !ok {
			if c, ok := conn.(gorm.TxCommitter); ok {
				_ = c.Rollback()
			}
			return nil, fmt.Errorf("relayergorm: %T began a transaction of type %T, which does not implement gorm.Tx", p.ConnPool, conn)
		}
	default:
		// wrapPool admits beginners only.
		return nil, gorm.ErrInvalidTransaction
	}
	return &txConn{Tx: tx, pool: p, e: p.w.Enlist()}, nil
}

// GetDBConn implements gorm.GetDBConnector, so that db.DB() keeps working.
func (p *connPool) GetDBConn() (*sql.DB, error) {
	switch c := p.ConnPool.(type) {
	case *sql.DB:
		return c, nil
	case gorm.GetDBConnector:
		return c.GetDBConn()
	}
	return nil, gorm.ErrInvalidDB
}

// Ping checks the wrapped pool's connection, as gorm.Open does.
func (p *connPool) Ping() error {
	if pinger, ok := p.ConnPool.(interface{ Ping() error }); ok {
		return pinger.Ping()
	}
	db, err := p.GetDBConn()
	if err != nil {
		return err
	}
	return db.Ping()
}

// txConn is a transaction begun through [connPool]: the database transaction
// (a *sql.Tx unless the wrapped pool begins another gorm.Tx) and the outbox
// side of it. Every statement method is the embedded transaction's; Commit and
// Rollback also end the enlistment and settle the models' pending messages.
type txConn struct {
	gorm.Tx
	pool    *connPool
	e       *enlist.Enlistment
	written written
}

// Commit commits the transaction and, when that succeeded, makes the models
// forget the messages written in it and hands its rows to the writer's
// listener. When it failed, the models keep their messages pending, as after a
// rollback.
func (t *txConn) Commit() error {
	if err := t.Tx.Commit(); err != nil {
		t.written.rolledBack()
		t.e.RolledBack()
		return err
	}
	t.written.committed()
	t.e.Committed()
	return nil
}

// Rollback rolls the transaction back; nothing is notified, and the models
// keep their messages pending for their next save.
func (t *txConn) Rollback() error {
	err := t.Tx.Rollback()
	t.written.rolledBack()
	t.e.RolledBack()
	return err
}

// GetDBConn implements gorm.GetDBConnector, so that tx.DB() keeps working
// inside a transaction.
func (t *txConn) GetDBConn() (*sql.DB, error) { return t.pool.GetDBConn() }

// publish writes msgs in the transaction, on the database transaction itself:
// never through GORM's Exec, which rewrites placeholders, nor through a
// PreparedStmtTX, which would cache one prepared statement per batch size.
func (t *txConn) publish(ctx context.Context, msgs []relayer.Outgoing) error {
	return t.e.Publish(ctx, t.Tx, msgs...)
}

// validate refuses msgs with the error publishing them would return, without
// writing anything, so that a statement can be refused before it writes its
// business rows.
func (t *txConn) validate(ctx context.Context, msgs []relayer.Outgoing) error {
	if len(msgs) == 0 {
		return nil
	}
	return t.pool.w.Validate(ctx, msgs...)
}
