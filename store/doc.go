// Package store is the PostgreSQL store of a Relayer outbox, over database/sql.
//
// It holds the schema of the outbox tables and the statements of its stable
// surface: the schema's versioned migrations ([Migrate], [SchemaSQL],
// [Migrations]), the insert used by enlistment ([Store.Insert]), reads of one
// lane or of the unordered rows ([Store.ReadLane], [Store.ReadUnordered]),
// counts, the fenced claim protocol that integrations build on
// ([Store.Claim], [Store.ClaimBatch], [Store.Renew], [Store.Complete],
// [Store.CompleteBatch], [Store.Fail], [Store.FailBatch], [Store.Park],
// [Store.ReleaseBatch]), redrive, the operators' reads and the inbox.
//
// # Tables
//
// One outbox is seven tables in Tables.Schema, each name starting with
// Tables.TablePrefix: <prefix>outbox (pending messages), <prefix>dead (dead
// letters), <prefix>relayer_leases (lane and worker leases),
// <prefix>relayer_pauses (the destinations workers have set aside, published
// for operators), <prefix>relayer_settings (what writers and workers must
// agree on: the lane count), <prefix>relayer_activity (what each runner
// delivered, for consoles) and <prefix>inbox (consumer deduplication), plus
// <prefix>relayer_migrations, which records the applied schema steps. Schema and prefix are validated as plain lowercase
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
// The claim protocol above is the store's contract for integrations.
// Relayer's own dispatchers run two more protocols on the same tables: takes
// for unordered rows (a transaction deletes the rows it sends, holding them
// locked while the broker is called) and leased lanes for ordered rows (a
// transaction locks its lanes' leases, reads their heads from cursors,
// sends, and settles what it sent before committing). Their statements are
// the module's own, in an internal package, and change with any release;
// package dispatch describes how they behave.
//
// # Which methods are stable
//
// Every exported name of this package is the stable surface, for operators
// and integrators, kept without breaking changes from v1.0.
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
// Ordered workers read the lanes they keep holding from a cursor, which
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
