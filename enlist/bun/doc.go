// Package relayerbun publishes outbox messages inside bun transactions
// (github.com/uptrace/bun) and tells the writer's listener about them only
// after the transaction has committed.
//
// # Installing the hook
//
// bun reports the BEGIN, COMMIT and ROLLBACK of every transaction to its query
// hooks. [NewHook] returns the hook that turns those reports into the outbox
// side of each transaction. Install it on the bun.DB before any transaction
// begins, once per bun.DB:
//
//	runner, err := dispatch.NewRunner(sqldb, outbox, dispatch.RunnerOptions{}) // the workers
//	...
//	w, err := enlist.NewWriter(outbox, enlist.Options{Listener: runner})
//	...
//	db := bun.NewDB(sqldb, pgdialect.New()).WithQueryHook(relayerbun.NewHook(w))
//
// WithQueryHook returns a copy of the DB; only transactions begun on a DB that
// has the hook (that copy, or copies made from it, and their Conns) can
// publish. bun's older AddQueryHook, which changes the DB in place, works too.
//
// # Three ways in
//
// [Publish] and [PublishAll] write the rows in the transaction of the bun.Tx
// they are given, in one round trip. A bun.Tx does not say which transaction
// state it belongs to, so Publish must be able to find it, which it can in
// three cases.
//
// In the callback of db.RunInTx (or conn.RunInTx), with the context the
// callback receives, or one derived from it. bun passes the callback the
// context the BEGIN hooks returned, which carries the transaction's state:
//
//	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
//		if _, err := tx.NewInsert().Model(order).Exec(ctx); err != nil {
//			return err
//		}
//		return relayerbun.Publish(ctx, tx, OrderPlaced{ID: order.ID}, relayer.Key(order.CustomerID))
//	})
//
// On a transaction begun by [BeginTx] instead of db.BeginTx, with any context.
// BeginTx registers the transaction under the *sql.Tx of the bun.Tx it
// returns; it fails, and rolls the transaction back, on a DB without the hook:
//
//	tx, err := relayerbun.BeginTx(ctx, db, nil)
//	if err != nil {
//		return err
//	}
//	defer tx.Rollback()
//	...
//	if err := relayerbun.Publish(ctx, tx, OrderPlaced{ID: order.ID}, relayer.Key(order.CustomerID)); err != nil {
//		return err
//	}
//	return tx.Commit()
//
// On a savepoint made with tx.RunInTx or tx.BeginTx from either kind of
// transaction. Its rows belong to the outer transaction and are notified after
// the outer commit. The callback of tx.RunInTx receives the context of tx, so
// publishing there with that context always works; any other context works
// once the transaction has published, or when it was begun by BeginTx.
//
// A transaction begun by db.BeginTx, published with the caller's own context,
// cannot be found: Publish returns an error wrapping
// [relayer.ErrNotInTransaction] that says to begin with relayerbun.BeginTx, or
// to publish inside db.RunInTx with the context it passes. So does publishing
// on a transaction that has ended. An invalid message writes nothing and
// returns an error wrapping [relayer.ErrInvalidMessage].
//
// # After commit, never before
//
// When a transaction begins, the hook gives it a fresh, empty state (the one
// BeginTx prepared, or a new one) in the context bun keeps in the bun.Tx; bun
// hands that same context to the hooks of the transaction's COMMIT and
// ROLLBACK. The state is bound to the transaction's *sql.Tx, and gets its
// [enlist.Enlistment], when BeginTx returns or at the first publish. When bun
// reports that the outermost COMMIT returned without error, the hook calls
// [enlist.Enlistment.Committed], which hands the rows to the listener on the
// committing goroutine. A ROLLBACK, a COMMIT that failed (a deferred
// constraint, a cancelled context, a broken connection) and a failed BEGIN
// notify nothing: rows of a commit whose outcome is unknown are left to
// recovery, which finds them if they were committed. Either way the
// transaction's state is released when it ends.
//
// Savepoints do not end the transaction: bun reports their release and
// rollback as RELEASE SAVEPOINT and ROLLBACK TO SAVEPOINT, which the hook
// ignores. Rows written in a savepoint that was rolled back are gone from the
// table, but their ids may still be in the notification of the outer commit;
// listeners never send a notified row that is not in the table.
//
// Only what bun does is seen. A transaction committed or rolled back through
// the *sql.Tx embedded in the bun.Tx (tx.Tx.Commit()) is not reported to
// hooks: its rows are durable and recovery sends them, but the listener is not
// told. Its state is forgotten when the *sql.Tx is garbage.
//
// # How Publish finds the transaction
//
// The package uses bun's public API only: query hooks, the context bun passes
// from the BEGIN hooks to the RunInTx callback and the COMMIT and ROLLBACK
// hooks, the exported *sql.Tx of a bun.Tx, and its Dialect. Publish looks, in
// order:
//
//  1. in a registry keyed by the bun.Tx's *sql.Tx, which a transaction shares
//     with its savepoints. It holds every transaction begun by BeginTx and
//     every one that has published, until it ends;
//  2. in ctx, for the state of the transaction whose callback ctx came from.
//     On first use that state is bound to the bun.Tx's *sql.Tx and registered.
//
// The state in ctx is refused, with an error wrapping
// [relayer.ErrNotInTransaction], rather than guessed at: when it is bound to
// another *sql.Tx (a transaction begun with db.BeginTx inside the callback of
// one that has published); when it is of a bun.DB with another dialect value
// (most likely a DB without the hook, begun inside the callback of one with
// it; copies made by WithQueryHook share their dialect, so this check does not
// tell them apart); and when another transaction was begun with that context,
// is still open and has not published, since the bun.Tx in hand may be that
// one. In the last case the transaction of the callback is refused too until
// the other ends or publishes: begin the other with BeginTx, or run it with
// db.RunInTx, which ends it before returning, or publish on the outer one
// first.
//
// What cannot be checked is a context of one transaction passed with the
// bun.Tx of another whose state is not yet bound. Inside the callback of a
// transaction begun within another's callback, the context leads to the inner
// transaction; publishing the outer bun.Tx with it, before the outer has
// published, binds the inner state to the outer transaction, whose rows are
// then notified when the inner one commits instead of after the outer commit.
// Pass each bun.Tx with the context its own callback received, or begin it
// with BeginTx.
//
// # Writes bypass bun's ExecContext
//
// bun's Tx.ExecContext formats the query itself, replacing its ? placeholders,
// and passes no arguments to database/sql: the $1, $2 ... parameters of the
// outbox insert would be silently dropped. Publish therefore writes through the
// *sql.Tx embedded in the bun.Tx, the same connection and transaction, with
// real parameters. The insert is not reported to query hooks, so bun's
// logging and tracing hooks do not see it.
package relayerbun
