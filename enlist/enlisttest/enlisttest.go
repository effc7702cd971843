// Package enlisttest is the conformance suite every enlistment entry point
// passes: raw *sql.Tx, sqlx, bun, GORM and pgx. An adapter's tests describe how to
// begin, publish in, nest, commit and roll back a transaction of its data
// layer, and [Run] checks the same promises against each, on the real database.
package enlisttest

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
)

// EntryPoint is one data layer's way into a transaction.
type EntryPoint interface {
	// Begin starts an explicit transaction whose ctx bounds it.
	Begin(ctx context.Context) (Tx, error)
	// RunInTx runs fn in a transaction, committing when it returns nil and
	// rolling back when it returns an error or panics (the panic continues).
	RunInTx(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error
}

// Tx is a transaction of the data layer under test.
type Tx interface {
	// Exec runs a business statement (no arguments) through the data layer.
	Exec(ctx context.Context, query string) error
	// Publish publishes msgs through the adapter's API.
	Publish(ctx context.Context, msgs ...relayer.Outgoing) error
	// Nested runs fn in a nested transaction (a savepoint) that is rolled back
	// when fn returns an error and kept otherwise.
	Nested(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error
	Commit() error
	Rollback() error
}

// Adapter describes an entry point under test.
type Adapter struct {
	// Open returns the entry point on db for writer w. It is called once per
	// scenario, each with its own schema, writer and listener.
	Open func(t *testing.T, db *sql.DB, w *enlist.Writer) EntryPoint
	// Driver is the database/sql driver the adapter uses: "pgx" or "postgres".
	// Default: "pgx".
	Driver string
}

// Execer runs a statement in a transaction.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

var savepoints atomic.Int64

// Savepoint implements [Tx.Nested] for data layers without savepoint support
// of their own: it runs fn inside SAVEPOINT on tx, rolling back to it when fn
// returns an error and releasing it otherwise.
func Savepoint(ctx context.Context, tx Execer, fn func(ctx context.Context) error) error {
	sp := fmt.Sprintf("enlisttest_sp_%d", savepoints.Add(1))
	if _, err := tx.ExecContext(ctx, "SAVEPOINT "+sp); err != nil {
		return err
	}
	if err := fn(ctx); err != nil {
		if _, rerr := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT "+sp); rerr != nil {
			return rerr
		}
		return err
	}
	_, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT "+sp)
	return err
}

// SQL returns the entry point of enlist's own API on database/sql: an
// [enlist.Writer]'s transactions on db. The suite runs it on each driver;
// it is also the reference an adapter's behaviour is compared with.
func SQL(db *sql.DB, w *enlist.Writer) EntryPoint { return sqlEntry{db: db, w: w} }

type sqlEntry struct {
	db *sql.DB
	w  *enlist.Writer
}

type sqlTx struct {
	tx *enlist.Tx
}

func (e sqlEntry) Begin(ctx context.Context) (Tx, error) {
	tx, err := e.w.Begin(ctx, e.db, nil)
	if err != nil {
		return nil, err
	}
	return sqlTx{tx: tx}, nil
}

func (e sqlEntry) RunInTx(ctx context.Context, fn func(context.Context, Tx) error) error {
	return e.w.RunInTx(ctx, e.db, nil, func(tx *enlist.Tx) error {
		return fn(ctx, sqlTx{tx: tx})
	})
}

func (t sqlTx) Exec(ctx context.Context, query string) error {
	_, err := t.tx.ExecContext(ctx, query)
	return err
}

func (t sqlTx) Publish(ctx context.Context, msgs ...relayer.Outgoing) error {
	if len(msgs) == 1 {
		return t.tx.Publish(ctx, msgs[0].Message, func(o *relayer.Outgoing) { *o = msgs[0] })
	}
	return t.tx.PublishAll(ctx, msgs...)
}

func (t sqlTx) Nested(ctx context.Context, fn func(context.Context, Tx) error) error {
	return Savepoint(ctx, t.tx, func(ctx context.Context) error { return fn(ctx, t) })
}

func (t sqlTx) Commit() error   { return t.tx.Commit() }
func (t sqlTx) Rollback() error { return t.tx.Rollback() }
