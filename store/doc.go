// Package store is the PostgreSQL store of a Relayer outbox, over database/sql.
//
// It owns every statement that touches the outbox tables: the schema and its
// versioned migrations ([Migrate], [SchemaSQL], [Migrations]), the insert used by
// enlistment ([Store.Insert]), reads of one lane or of the unordered rows
// ([Store.ReadLane], [Store.ReadUnordered]), counts, and the fenced claim
// protocol that dispatchers build on ([Store.Claim], [Store.ClaimBatch],
// [Store.Renew], [Store.Complete], [Store.CompleteBatch], [Store.Fail],
// [Store.FailBatch]).
//
// # Tables
//
// One outbox is five tables in Options.Schema, each name starting with
// Options.TablePrefix: <prefix>outbox (pending messages), <prefix>dead (dead
// letters), <prefix>relayer_leases (lane and worker leases),
// <prefix>relayer_pauses (the destinations workers have set aside, published
// for operators) and <prefix>inbox (consumer deduplication), plus
// <prefix>relayer_migrations, which records the
// applied schema steps. Schema and prefix are validated as plain lowercase
// identifiers when a store is built, and every statement is built from them once.
//
// # Eligibility and claims
//
// A row is eligible at an instant when it is not parked, its delivery time (if
// any) is at or before the instant, and it has no claim or its claim expired at
// or before the instant. Reads and counts return eligible rows only. A claim is a
// random token plus an expiry, taken in one conditional UPDATE; a competing claim
// succeeds only once the previous one has expired. Renewing, completing and
// failing require the current token and a claim that is still live, and report
// false without changing anything otherwise, so an owner whose claim lapsed can
// never overwrite the progress of the next owner.
//
// Instants are UTC with microsecond precision, as PostgreSQL stores them; the
// store truncates every instant it is given. Pass instants from one clock (the
// dispatchers pass the database's, measured against their own).
//
// # What the dispatchers use
//
// The claim protocol above is the store's contract for integrations. The
// package's own dispatchers build on two protocols:
//
//   - Takes, for unordered rows (direct dispatch and recovery): a transaction
//     deletes the rows it will send ([Store.TakeIDs] by id,
//     [Store.TakeNextUnordered] after a cursor, passing over set-aside
//     destinations, [Store.TakeNextUnorderedTo] one destination's, for a
//     probe), holds them locked while the broker is called, writes back
//     the rows it did not send with [Store.Restore], and commits. A crash or a
//     lost connection rolls the take back and every row is there again.
//   - Lanes, for ordered rows: a transaction takes or renews the leases of
//     the lanes it runs in one statement ([Store.AcquireLaneLeases]; or,
//     for leases it renewed a moment ago, locks them without writing them,
//     [Store.LockLaneLeases]), reads
//     their heads ([Store.ReadLanes], each lane from its [LaneCursor], which
//     [LaneCursor.Advance] moves past what the transaction settled once it
//     commits; [Store.ReadLaneHeads] reads from the lanes' starts), sends the
//     admitted prefixes, and
//     settles them with [Store.DeleteLaneRows], [Store.FailLaneRows],
//     [Store.ParkLaneRows] and [Store.Bury] before committing. On a pinned
//     pgx connection the lock goes with the read, and a batch that only
//     deletes sends its delete with its commit, in one round trip each
//     ([Store.LockAndReadLanes], [Store.CommitLaneDeletes]). The locked
//     lease rows keep every other worker off the lanes' rows until then, so
//     the rows need no claim ([Store.ClaimLaneRows] claims them for a caller
//     that settles outside that transaction). [Store.ProbeLanes] finds
//     the lanes worth a batch, each read from its cursor too, and
//     [Store.Heartbeat] keeps the workers' membership.
//
// # Which methods are stable
//
// The store has two surfaces, and each method's place is stated here:
//
//   - The stable surface, for operators and integrators, kept without
//     breaking changes from v1.0: the schema ([Migrate], [Migrations],
//     [SchemaSQL], [SchemaVersion], [MinSchemaVersion], [Store.CheckSchema],
//     [Store.CheckSchemaWith]); [Options], [New], [Store.With] and the
//     stored [Row]; the writes of enlistment ([Store.Insert],
//     [Store.InsertWith]); the claim protocol above, which is the store
//     contract integrations build on (reads [Store.ReadLane] and
//     [Store.ReadUnordered]; counts [Store.CountEligible] and
//     [Store.CountDead]; [Store.Claim], [Store.ClaimBatch], [Store.Renew],
//     [Store.Complete], [Store.CompleteBatch], [Store.Fail],
//     [Store.FailBatch]); the redrive methods ([Store.DeadLetters],
//     [Store.RequeueDead], [Store.PurgeDead], [Store.ParkedKeys],
//     [Store.ParkedHeads], [Store.RetryParked], [Store.SkipParkedHead]); the
//     operator reads ([Store.Stats], [Store.DeadByReason], [Store.Backlog],
//     [Store.Lanes], [Store.Message], [Store.Activity], [Store.Pauses],
//     [Store.LiveLeases]); and the inbox ([Store.RecordInbox]).
//   - The project's own, exported so that the worker packages can share
//     them and free to change in any release: the takes and lane
//     statements of the next section, leases and membership
//     ([Store.AcquireLease], [Store.ReleaseLease], [Store.ReleaseLeases],
//     [Store.Heartbeat], [Store.Members], [LaneLeaseName], [MemberLeaseName]), pauses
//     ([Store.PublishPauses], [Store.ClearPauses]), worker sessions
//     ([TuneWorkerConn], [TuneTakingConn], [UntuneWorkerConn]),
//     [Store.ServerTime], [Store.Notify], [Store.RowsBeyondLanes] and the
//     retention deletes ([Store.DeleteInboxBefore], [Store.DeleteDeadBefore]).
//
// # Drivers
//
// The store works with any database/sql PostgreSQL driver that passes string
// parameters through. On a *sql.Conn of pgx's stdlib driver, the lane
// statements a worker sends together travel in one round trip (a pgx batch);
// on other drivers they run one by one, with the same results. It is tested
// with github.com/jackc/pgx/v5/stdlib and
// github.com/lib/pq (its conformance tests, which run on both, live in the
// repository's tests module). Array parameters travel as array literals in
// text form.
//
// # Errors
//
// Database errors and cancellation are returned wrapped, with the operation
// named; they never read as an empty backlog. When the context was done, the
// error also matches context.Canceled or context.DeadlineExceeded. A cancelled
// mutation may still have committed. A row that cannot be read back (for example
// a headers column that is not in the binary header format) fails the read with
// a *RowError naming the row.
//
// # Autovacuum
//
// The outbox table is a queue: rows are inserted and soon deleted, which leaves
// dead index entries at the head of the pending indexes. The migration sets the
// table's autovacuum thresholds to a fixed 5,000 changed rows instead of a share
// of the table, so that vacuum and analyze keep pace with a busy queue. A long
// transaction anywhere in the database keeps dead entries from being removed.
// Ordered workers read the lanes they keep holding from a [LaneCursor], which
// passes over the dead entries of the rows they delivered: each row records
// the transaction that made it eligible (xact_id, migration 4), so that a read
// finds every row its previous read's snapshot did not see, whatever its id,
// in a small index of its own. A transaction that holds a snapshot without
// writing (a report) costs those reads nothing; one that wrote and stays open
// costs one index probe per lane. Takes of unordered rows, reads from a
// lane's start (after a lease changes hands) and probes still walk dead
// entries: keep transactions short on a database that hosts an outbox.
//
// The outbox table's pages are filled whole (fillfactor 100, migration 5):
// workers take rows with a DELETE, and the updates they run (a failure, a
// park) change columns of an index predicate, which PostgreSQL never makes
// heap-only, so free room on each page would only make every insert write
// more pages. [Store.Claim] and its kin, which no worker runs, update columns
// no index covers; on full pages those updates write index entries too.
package store
