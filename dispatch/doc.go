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
// missing transport or a failed capability lookup, rows of paused
// destinations (see Failures), and rows of notifications it could not queue.
// Recovery delivers them.
//
// # Failures
//
// A send fails for one of three kinds of reasons, and each ends differently:
//
//   - The destination is down (the transport's error wraps
//     relayer.ErrUnavailable) or slow (a send still running after a sixth of
//     its claim, or timing out). The (transport, destination) is paused: for
//     1 second when unavailable, 5 after a timeout, doubling with each
//     further failure up to a minute (jittered). The direct, recovery and
//     ordered workers of a [Runner] share the pauses (a direct dispatcher
//     shares those of the recovery it wakes). While it is paused, direct
//     dispatch leaves the destination's rows in the table, recovery's takes
//     pass over them, and an ordered key waits at its first row for it (the
//     lane's keys bound elsewhere go on): no row is taken, rewritten or
//     charged an attempt. When an interval ends,
//     one worker sends one probe (recovery: a single row taken for it) and
//     the others keep passing the destination over; a probe that succeeds
//     ends the pause, one that fails starts the next interval.
//   - The message is refused for good (relayer.ErrPermanent), or has failed
//     as many times as its retry policy allows (relayer.Retry, per route with
//     the outbox's as fallback; default 10). An unordered message moves to the
//     dead letters in the transaction that took it, with its content,
//     attempts, last error and reason (store.ReasonPermanent,
//     store.ReasonExhausted). An ordered message is parked, and holds its key:
//     the key's later messages wait, unsent, while the lane's other keys go
//     on. Unordered rows whose stored headers do not decode are
//     dead-lettered as store.ReasonCorrupt, their bytes unchanged; an
//     ordered one is parked with its key, unsent, so that the operator
//     decides between a redrive (once the bytes are mended) and a skip.
//   - Any other failure spends one attempt and makes the message wait for its
//     retry time, on the database's clock: the policy's Backoff (default 1s)
//     after the first failure, doubling up to MaxBackoff (default 5m), each
//     shortened by up to a fifth at random. A waiting ordered message holds
//     its key, not its lane: the batch that saw it fail goes on with the
//     lane's other keys at once.
//
// Dead letters and parked keys wait for an operator: see the store's
// redrive methods and the relayer command's dead and parked commands. Within
// one recovery take, each destination is sent on its own goroutine with the
// whole claim as its budget, so that a slow one holds up only its own rows.
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
