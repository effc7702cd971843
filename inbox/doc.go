// Package inbox deduplicates at-least-once deliveries on the consumer's side.
//
// Relayer delivers every committed message at least once; after a crash
// between a broker's acceptance and the outbox's record of it, a message can
// arrive twice. A consumer that must act once per message records the message
// in its inbox inside the same database transaction as the work the message
// causes: the record and the work commit together or not at all, so a
// redelivery finds the record and is skipped, and a failed attempt leaves no
// record behind and is retried.
//
// # Handling a message
//
// Build one [Inbox] for the consumer's database and call [Inbox.Handle] (or
// [Inbox.HandleMessage] with a [relayer.Message]) inside the consumer's
// transaction:
//
//	ib, err := inbox.New(store.Tables{Schema: "billing"})
//	...
//	tx, err := db.BeginTx(ctx, nil)
//	if err != nil {
//		return err
//	}
//	defer tx.Rollback()
//	handled, err := ib.Handle(ctx, tx, "invoicing", messageID, func(ctx context.Context) error {
//		_, err := tx.ExecContext(ctx, `INSERT INTO invoices (order_id) VALUES ($1)`, orderID)
//		return err
//	})
//	if err != nil {
//		return err // rolled back, record included: the redelivery runs again
//	}
//	if err := tx.Commit(); err != nil {
//		return err
//	}
//	// Acknowledge the broker's message now, whether handled or a duplicate.
//
// The consumer name scopes deduplication: two consumers (two services, or two
// handlers in one service) each handle the same message once. messageID is the
// id the producer's outbox gave the message ([relayer.Message.ID]), which
// travels with it to the broker.
//
// # What Handle does
//
// [Inbox.Handle] inserts the pair (consumer, messageID) into the inbox
// table through q, the consumer's open transaction. When the pair is new, it
// calls the handler with ctx and returns handled = true with the handler's
// error, unchanged. When the pair is already there, the message was handled
// before: Handle returns handled = false and a nil error, and the handler is
// not called.
//
// The transaction stays the caller's: Handle neither commits nor rolls back,
// and the handler must write through the same transaction, or its writes
// are not covered by the record. The rule for the caller is short. On a nil
// error, commit, a duplicate included, and acknowledge the message to its
// broker; on an error, roll back, which removes the record too, so that the
// broker's redelivery runs the handler again. A handler that panics leaves
// the transaction to the caller in the same way.
//
// Handle checks its arguments before the database sees them. A q that is not
// a transaction (see Data layers), an empty or malformed consumer name, the
// zero UUID and a nil handler make it return an error wrapping
// store.ErrInvalidArgument; a nil q, one wrapping store.ErrNilDB. ctx bounds
// the insert of the record, and the wait described next.
//
// # Concurrent deliveries
//
// Two deliveries of one message may run at once (a redelivery overtaking a slow
// first attempt, or two consumer instances). The second transaction's record
// waits on the inbox's primary key until the first transaction ends; then it
// is skipped if the first committed, or handled if the first rolled back. So
// under READ COMMITTED, PostgreSQL's default, the handler's effects commit
// exactly once; bound the wait with ctx. Under REPEATABLE READ or
// SERIALIZABLE, a record committed by another transaction after this one
// took its snapshot makes Handle fail with a serialization error (SQLSTATE
// 40001) instead of a skip; retry the transaction as after any serialization
// failure, and the retry is skipped.
//
// # Data layers
//
// Handle takes the transaction as a store.DBTX, the ExecContext and
// QueryContext pair of database/sql, and it must be a transaction. A handle
// that begins transactions rather than being one (a *sql.DB, a *sql.Conn, a
// *sqlx.DB, GORM's ConnPool outside a transaction) is refused, since the
// record would commit on its own before the handler ran; so is a value of
// any of bun's own types, whose ExecContext drops PostgreSQL's $n
// arguments. The check looks at q's type only and costs no round trip. Each
// data layer has its own way to reach its transaction:
//
// database/sql: the *sql.Tx, as above.
//
// sqlx: the *sqlx.Tx itself (for example inside relayersqlx's RunInTx, the
// *relayersqlx.Tx):
//
//	tx, err := sqlxDB.BeginTxx(ctx, nil)
//	...
//	handled, err := ib.Handle(ctx, tx, "invoicing", messageID, func(ctx context.Context) error {
//		_, err := tx.NamedExecContext(ctx, `INSERT INTO invoices (order_id) VALUES (:order_id)`, invoice)
//		return err
//	})
//
// bun: the *sql.Tx embedded in the bun.Tx, tx.Tx. Never the bun.Tx itself: its
// ExecContext formats ? placeholders and drops $n arguments, and Handle refuses
// it. The handler can keep using bun's query builders on tx:
//
//	err := bunDB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
//		_, err := ib.Handle(ctx, tx.Tx, "invoicing", messageID, func(ctx context.Context) error {
//			_, err := tx.NewInsert().Model(&invoice).Exec(ctx)
//			return err
//		})
//		return err
//	})
//
// GORM: the transaction's connection pool, tx.Statement.ConnPool, inside
// db.Transaction or between db.Begin and Commit. It is a *sql.Tx, GORM's
// *gorm.PreparedStmtTX with PrepareStmt, or relayergorm's transaction when that
// plugin is installed; all work. Outside a transaction the pool begins
// transactions rather than being one, and Handle refuses it:
//
//	err := gormDB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
//		_, err := ib.Handle(ctx, tx.Statement.ConnPool, "invoicing", messageID, func(ctx context.Context) error {
//			return tx.Create(&invoice).Error
//		})
//		return err
//	})
//
// # Tables and retention
//
// Records live in the <prefix>inbox table that store.Migrate creates with the
// rest of an outbox's tables, in the schema and with the prefix of the
// store.Tables given to [New]. A consumer that publishes nothing still
// migrates them all; the outbox tables stay empty.
//
// Records accumulate, one per consumer and message. dispatch.Cleanup deletes
// those older than its InboxRetention (seven days by default), and that
// retention is the deduplication window: a message redelivered after its
// record was deleted is handled again. Keep it longer than the longest time a
// message can spend in the broker and in redelivery.
package inbox
