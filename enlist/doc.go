// Package enlist writes outbox messages inside the caller's database
// transaction and tells a listener about them once the transaction commits.
//
// A [Writer] is built once from a relayer.Outbox: it routes each message by
// its type, serializes it, adds the content-type header, gives it a UUIDv7 id
// and, for ordered routes, its lane. Everything is validated before anything is
// written: a nil message, a type without a route, an ordered route without a
// key and a header name that is not valid UTF-8 are errors wrapping
// relayer.ErrInvalidMessage, and so is an ordering key over
// relayer.KeyMaxBytes. Several messages published together are written in
// one statement, one round trip.
//
// The first publish of a writer also checks, in its transaction, that the
// outbox's tables carry every migration this release needs: on an outdated
// schema it fails with store.ErrSchemaOutdated, saying how to migrate,
// rather than write rows that no worker of this release could deliver (see
// [Options].RefuseNewerSchema for a newer one).
//
// # After commit
//
// database/sql has no commit hook, so whoever needs "after commit" owns the
// Commit call. [Tx] embeds the *sql.Tx and overrides Commit and Rollback; its
// Commit commits and then hands the transaction's rows to the writer's
// [CommitListener] (the direct dispatcher). A rollback never notifies. The
// listener never makes the commit fail: rows it cannot take are committed and
// left for recovery, which is logged and counted ([Writer.LeftForRecovery]).
// A savepoint that rolls back removes its rows from the table, but the
// notification may still name them; listeners never send a notified row that
// is not in the table.
//
// # Entry points
//
//   - database/sql: [Writer.Begin], [Writer.Wrap] for a transaction the caller
//     began, and [Writer.RunInTx], which commits on nil and rolls back on an
//     error or a panic.
//   - sqlx: package enlist/sqlx (relayersqlx).
//   - bun: package enlist/bun (relayerbun), a query hook.
//   - GORM: package enlist/gorm (relayergorm), a plugin with domain events.
//
// Data-layer adapters build on [Writer.Enlist], which returns the outbox side
// of one transaction, and package enlisttest, the conformance suite every
// entry point passes.
package enlist
