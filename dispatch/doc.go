// Package dispatch delivers outbox rows to their transports.
//
// # Direct dispatch
//
// [Direct] sends unordered messages right after their transaction commits. It
// is the writer's commit listener (enlist.Options.Listener): each committed
// transaction's rows reach its bounded queue without the commit waiting for a
// broker, and its worker then, per (transport, destination):
//
//  1. opens a transaction and claims the rows with one DELETE (a take, see
//     store.TakeIDs) that skips rows locked by anyone else, rows held by a
//     live claim, rows not yet due and rows no longer in the table (a
//     savepoint that rolled back, a row another dispatcher already sent); the
//     transaction's row locks are the claim;
//  2. sends only the rows the take returned — with SendBatch, or Send for one
//     row — in chunks bounded by BatchSize and the endpoint's MaxBatchSize,
//     exactly as stored: id, body, headers and creation trace context;
//  3. writes back the rows the broker refused, with attempts and last error
//     recorded, and commits, which removes the accepted rows for good.
//
// A claim bounds its send: a transport call still running at ClaimDuration is
// abandoned and its rows are written back untouched. The claim's transaction
// stays open during the send; the worker's session ends it on the server
// (idle_in_transaction_session_timeout) a few seconds past that deadline, so a
// worker that stops responding never holds rows. A crash or a failed commit
// rolls back: every row is in the table again at once, and will be sent again.
// Delivery is at least once: a crash between the broker's acceptance and the
// commit, a failed commit, or a send abandoned at its deadline can deliver a
// message again.
//
// Taking rows by DELETE in the claiming transaction is about half the database
// work of claiming them with an UPDATE and deleting them after the send: one
// statement per batch and no second version of each row.
//
// Rows direct dispatch does not send stay in the table: ordered rows (the
// ordered dispatcher's), rows scheduled for later, rows of groups skipped for a
// missing transport or a failed capability lookup, rows of destinations set
// aside as slow (below), and rows of notifications it could not queue.
// Recovery delivers them.
//
// # Slow destinations
//
// A send still running after a sixth of its claim sets its (transport,
// destination) aside while it runs; a send that times out sets it aside for 5
// seconds, doubling with each further timeout up to a minute (jittered), and a
// send that completes in time brings it back. Direct dispatch leaves the rows
// of a set-aside destination in the table, and recovery's takes pass over
// them, so they stay untouched, attempts unspent, while other destinations
// flow. A direct dispatcher shares the set of the recovery it wakes
// (DirectOptions.Recovery). Within one recovery take, each destination is sent
// on its own goroutine with the whole claim as its budget.
//
// # Clocks
//
// Whether a row is due, claimed or old enough for recovery is judged on the
// database's clock: workers measure its offset from their own (every 30
// seconds, from a clock_timestamp() round trip) and compare stored times
// with it, so that writers and workers whose clocks disagree still agree.
//
// # Ordered dispatch
//
// [Ordered] workers deliver rows of ordered routes in per-key order. Keys map
// to lanes (relayer.Lane); live workers on the same tables share the lanes by
// rank and hold a lease per lane while they work it, so that a lane has at most
// one connected owner. See [Ordered] for the batch protocol.
//
// # Recovery
//
// [Recovery] delivers the unordered rows direct dispatch did not: rows it could
// not queue or take, rows whose send failed, rows of a process that died, rows
// written without a direct dispatcher, and scheduled rows once due. One instance
// per outbox works at a time, under a lease; it takes, sends and commits rows
// with the same protocol as direct dispatch, thousands per statement.
//
// # Connections
//
// Each worker pins connections from the application's *sql.DB for as long as
// it runs (direct dispatch: one per worker; recovery: one per drainer; an
// ordered worker: one per lane it runs at once, up to
// OrderedOptions.Concurrency), with asynchronous commit (store.TuneWorkerConn);
// leases and heartbeats borrow pooled connections briefly. Size the pool for
// them. Ordered workers and cleanup plan every statement for its
// values (custom plans). Direct dispatch and recovery run only takes on their
// connections and keep generic plans with sequential scans off
// (store.TuneTakingConn): no planning per take, and index scans even for a
// plan made while the outbox was empty.
//
// # Configuration
//
// Options structs are validated at construction; every field's zero value means
// its default. [LoadDirectOptions] reads them from a [Source]: environment
// variables ([EnvSource]) or a map ([MapSource]).
package dispatch
