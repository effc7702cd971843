package relayerbun

import (
	"context"
	"database/sql"
	"errors"
	"weak"

	"github.com/uptrace/bun"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
)

// BeginTx begins a transaction on db, a *bun.DB or a bun.Conn with the
// relayerbun hook, and registers it for publishing: [Publish] on the returned
// bun.Tx, or on a savepoint made from it, works with any context. ctx bounds
// the transaction as with db.BeginTx: when it is done before Commit, the
// transaction rolls back.
//
// If db has no relayerbun hook, the transaction is rolled back and BeginTx
// returns an error wrapping [relayer.ErrNotInTransaction]; so it does when db
// has hooks of two different writers. db must not be a bun.Tx: a savepoint
// belongs to its transaction, and needs no registering.
func BeginTx(ctx context.Context, db bun.IDB, opts *sql.TxOptions) (bun.Tx, error) {
	switch d := db.(type) {
	case nil:
		return bun.Tx{}, errors.New("relayerbun: BeginTx: nil db")
	case *bun.DB:
		if d == nil {
			return bun.Tx{}, errors.New("relayerbun: BeginTx: nil *bun.DB")
		}
	case bun.Tx, *bun.Tx:
		return bun.Tx{}, errors.New("relayerbun: BeginTx: db is a bun.Tx: begin a savepoint with tx.BeginTx or tx.RunInTx; it publishes into its transaction")
	}
	// The hook claims this state at the BEGIN instead of making its own.
	s := &txState{}
	tx, err := db.BeginTx(context.WithValue(ctx, stateKey{}, s), opts)
	if err != nil {
		s.end() // the hook ended it if it claimed it; else nobody may claim it now
		return bun.Tx{}, err
	}
	if err := s.bindBegun(tx.Tx); err != nil {
		s.end()
		_ = tx.Rollback()
		return bun.Tx{}, err
	}
	return tx, nil
}

// bindBegun binds s, handed to the BEGIN of tx by BeginTx, to tx.
func (s *txState) bindBegun(tx *sql.Tx) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.hook == nil:
		return errNoHook
	case s.dup:
		return errTwo
	case s.ended:
		return errEnded
	}
	s.begin = nil
	_, err := s.bindLocked(tx, weak.Make(tx))
	return err
}

// Publish writes one message in tx: one round trip. The message is handed to
// the writer's listener after the outermost commit succeeds. tx is
//
//   - a transaction begun by [BeginTx], or a savepoint made from it: any ctx
//     will do;
//   - the transaction of a db.RunInTx callback, with the context that
//     callback received (or one derived from it); or
//   - a savepoint of it made with tx.RunInTx or tx.BeginTx, with the context
//     of the transaction's callback, or any context once the transaction has
//     published.
//
// ctx also bounds the write and gives the trace context
// (relayer.Outbox.TraceContext).
//
// An invalid message writes nothing and returns an error wrapping
// [relayer.ErrInvalidMessage]. A transaction that has ended, or that Publish
// cannot tell from tx and ctx, writes nothing and returns an error wrapping
// [relayer.ErrNotInTransaction] that says why.
func Publish(ctx context.Context, tx bun.Tx, msg any, opts ...relayer.Option) error {
	return PublishAll(ctx, tx, relayer.NewOutgoing(msg, opts...))
}

// PublishAll writes msgs in tx in one round trip, as [Publish] does for one.
// Every message is validated first; if one is invalid, nothing is written.
func PublishAll(ctx context.Context, tx bun.Tx, msgs ...relayer.Outgoing) error {
	e, err := find(ctx, &tx)
	if err != nil {
		return err
	}
	// The rows go through the embedded *sql.Tx: bun's Tx.ExecContext formats
	// the query itself and passes no arguments on, which would drop the
	// insert's $n parameters.
	return e.Publish(ctx, tx.Tx, msgs...)
}

// find returns the enlistment of the transaction tx belongs to.
//
// First the registry, under the *sql.Tx that a transaction shares with its
// savepoints: it holds every transaction begun by BeginTx and every one that
// has published. Then the state in ctx, which is this transaction's when ctx
// was derived from the context bun passed to its db.RunInTx callback; it is
// bound to tx.Tx on first use. A state bound to another *sql.Tx is never used
// for this one, nor an unbound one that might belong to another transaction
// (see bindFromContext).
func find(ctx context.Context, tx *bun.Tx) (*enlist.Enlistment, error) {
	if tx.Tx == nil {
		return nil, errZeroTx
	}
	key := weak.Make(tx.Tx)
	if v, ok := bound.Load(key); ok {
		return v.(*txState).enlistment()
	}
	s := stateIn(ctx)
	if s == nil {
		return nil, errNoTx
	}
	e, err := s.bindFromContext(tx, key)
	if errors.Is(err, errOther) {
		// A concurrent publish may have bound the transaction meanwhile.
		if v, ok := bound.Load(key); ok {
			return v.(*txState).enlistment()
		}
	}
	return e, err
}
