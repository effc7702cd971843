// Package dispatch delivers outbox rows to their transports.
//
// # Direct dispatch
//
// [Direct] sends unordered messages right after their transaction commits. It
// is the writer's commit listener (enlist.Options.Listener): each committed
// transaction's rows reach its bounded queue without the commit waiting for a
// broker, and its worker then, per (transport, destination):
//
//  1. claims the rows with one fenced UPDATE that skips rows claimed by anyone
//     else, rows not yet due and rows no longer in the table (a savepoint that
//     rolled back, a row another dispatcher already sent);
//  2. sends only the rows the claim returned — with SendBatch, or Send for one
//     row — in chunks bounded by BatchSize and the endpoint's MaxBatchSize,
//     exactly as stored: id, body, headers and creation trace context;
//  3. deletes what the broker accepted with one fenced DELETE that checks every
//     row's token and live claim, or records the failure (attempts, last error)
//     and releases the claim.
//
// A claim bounds its send: a transport call still running at the claim's
// expiry is abandoned, since another worker may take the row from then on.
// Delivery is at least once: a crash between the broker's acceptance and the
// delete, a partial batch failure or a send that outlives its claim can deliver
// a message again.
//
// Rows direct dispatch does not send stay in the table: ordered rows (the
// ordered dispatcher's), rows scheduled for later, rows of groups skipped for a
// missing transport or a failed capability lookup, and rows of notifications it
// could not queue. Recovery delivers them.
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
// not queue or claim, rows whose send failed, rows of a process that died, rows
// written without a direct dispatcher, and scheduled rows once due. One instance
// per outbox works at a time, under a lease.
//
// # Connections
//
// Each worker pins one connection from the application's *sql.DB for as long
// as it runs, and runs its statements with custom plans and asynchronous
// commit (see store.TuneWorkerConn). Size the pool for it.
//
// # Configuration
//
// Options structs are validated at construction; every field's zero value means
// its default. [LoadDirectOptions] reads them from a [Source]: environment
// variables ([EnvSource]) or a map ([MapSource]).
package dispatch
