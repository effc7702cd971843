// Package relayergorm publishes outbox messages in GORM transactions.
//
// A service that writes its business rows with GORM writes the messages it
// wants to publish in the same transaction: both commit or neither does. After
// the commit, the rows are handed to the [enlist.Writer]'s listener (a
// dispatch.Runner, whose direct dispatch sends them right away); whatever it
// does not take, recovery delivers.
//
// # Installing
//
// Build an [enlist.Writer] from the service's [relayer.Outbox] and install the
// plugin once, right after gorm.Open:
//
//	runner, err := dispatch.NewRunner(sqlDB, outbox, dispatch.RunnerOptions{}) // the workers
//	...
//	writer, err := enlist.NewWriter(outbox, enlist.Options{Listener: runner})
//	...
//	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), &gorm.Config{})
//	...
//	if err := db.Use(relayergorm.Plugin(writer)); err != nil {
//		...
//	}
//
// The plugin wraps the *gorm.DB's connection pool; sessions derived from the
// *gorm.DB before db.Use keep the bare pool and cannot publish. Install it
// before calling WithContext, Session or Begin on the *gorm.DB.
//
// # Publishing
//
// Inside a transaction, [Publish] writes one message and [PublishAll] several,
// in one round trip each, on the transaction's own connection:
//
//	err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
//		if err := tx.Create(&order).Error; err != nil {
//			return err
//		}
//		return relayergorm.Publish(tx, OrderPlaced{ID: order.ID}, relayer.Key(order.Customer))
//	})
//
// The same works between tx := db.Begin() and tx.Commit(). The write is bounded
// by the statement's context (db.WithContext). Outside a transaction the
// plugin began, Publish writes nothing and returns an error wrapping
// [relayer.ErrNotInTransaction] that says how to get one.
//
// # Domain events
//
// A model that implements [MessageSource] (embedding [Messages] is the short
// way) records messages as its state changes. When it is created, updated or
// deleted, alone or in a slice, the plugin checks its pending messages before
// the statement writes anything (an unrouted type, an ordered route without a
// key: the statement fails with an error wrapping [relayer.ErrInvalidMessage]
// and writes no business row), and writes them in the statement's transaction
// after the statement and the model's After hooks succeeded. No explicit
// transaction is needed: GORM's implicit single-statement transaction carries
// the messages too.
//
// The messages stay pending on the model until the transaction that wrote them
// commits, and only then are forgotten. A rollback, or a failed commit, leaves
// them pending, so a transaction retried with the same model writes them
// again; so does the rollback of a savepoint (a nested db.Transaction that
// failed) for the messages written inside it. Saving a model twice in one
// transaction writes each message once.
//
// # After commit
//
// The listener hears of a transaction's rows only after its outermost commit
// returned success, and never after a rollback or a failed commit. GORM has no
// hook for that: a callback after gorm:commit_or_rollback_transaction runs
// before an explicit transaction commits (gorm issue #7367). The plugin
// therefore wraps the connection pool, and the transactions it begins commit
// the database transaction first and notify second. This covers
// db.Transaction, db.Begin with tx.Commit, and the implicit transaction of a
// single Create, Update or Delete.
//
// Nested db.Transaction calls use savepoints; the rows of a nested call that
// rolled back disappear with it. The notification at the outermost commit may
// still name them, which listeners allow for: they never send a row that is
// not in the table.
//
// # PrepareStmt
//
// With gorm.Config{PrepareStmt: true} (or a session with PrepareStmt), GORM
// wraps the pool in a *gorm.PreparedStmtDB and each transaction in a
// *gorm.PreparedStmtTX. The plugin goes inside the former, so the latter holds
// the plugin's transaction and its Commit reaches the notification. Outbox rows
// are written on the underlying transaction, never as cached prepared
// statements: one insert per batch size would fill GORM's statement cache.
//
// # SkipDefaultTransaction
//
// With SkipDefaultTransaction (in the gorm.Config or a session), GORM runs a
// lone Create, Update or Delete without a transaction. Messages cannot be
// published there: a statement on models with pending messages is refused
// before anything is written, with an error wrapping
// [relayer.ErrNotInTransaction], so the business rows are not written without
// their messages either. Wrap such statements in db.Transaction. Statements on
// models without pending messages are not affected.
//
// # Limits
//
// Transactions begun on a dedicated connection (db.Connection) bypass the
// wrapped pool and cannot publish. A statement succeeds whether or not it
// affected rows, so an Update or Delete that matched nothing still publishes
// the model's messages; check RowsAffected in the transaction if that matters.
// Messages recorded by an After hook are checked only when they are written,
// after the business rows: an invalid one fails the statement then, and under
// SkipDefaultTransaction any such message does. Savepoints are followed
// through the statements GORM runs for them (db.Exec of SAVEPOINT, ROLLBACK TO
// SAVEPOINT and RELEASE SAVEPOINT); one rolled back through another path
// leaves its messages counted as written.
package relayergorm
