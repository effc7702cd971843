// Package dispatch delivers outbox rows to their transports.
//
// A [Runner] runs an outbox's workers in one process: direct dispatch,
// recovery, ordered workers and retention cleanup, each of which
// [RunnerOptions] can turn off, so that a deployment may run each kind in
// processes of its own. The sections below describe what each does.
//
// # Direct dispatch
//
// Direct dispatch sends unordered messages right after their transaction
// commits. The Runner is the writer's commit listener
// (enlist.Options.Listener): each committed
// transaction's rows reach its bounded queue without the commit waiting for a
// broker, and its worker then, per (transport, destination):
//
//  1. opens a transaction and claims the rows with one DELETE (a take) that
//     skips rows locked by anyone else, rows held by a
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
//     1 second when unavailable, doubling with each further failure up to 5
//     seconds (such a probe is refused at once, and delivery resumes within
//     seconds of the broker's return), and for 5 seconds after a timeout,
//     doubling up to a minute (each such probe holds a worker for a send's
//     deadline); jittered. The pause is logged once when it begins, every
//     minute while it lasts (with the failed sends and held lanes since),
//     and once when it ends. A capability lookup that finds the destination
//     unavailable (a subject no stream captures) pauses it the same way.
//     The direct, recovery and ordered workers of a [Runner] share the
//     pauses (a direct dispatcher shares those of the recovery it wakes). While it is paused, direct
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
//     decides between a redrive (once the bytes are mended) and a skip. An
//     ordered row without a key (only another program writes one) has no
//     key to hold: it is dead-lettered as store.ReasonCorrupt.
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
// # Slow sends
//
// One word each for a send that outlives its time, here and in the code. A
// send is slow once it has run a sixth of its deadline: its destination is
// paused as slow (see Failures). A slow send still running once another
// part of its take or batch is done is a straggler: it is ended, so that the
// rest commits, and its rows are sent again. An ordered straggler still
// running at its hand-off time, or at its batch's deadline, is handed off:
// its lane leaves the batch, which commits the others, and a keeper holds
// that lane alone until the transport returns, however late, and records
// the outcome. Each lane of an ordered batch runs on a goroutine of its
// own, its run, which is what lets a batch go on without a lane handed off.
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
// Ordered workers deliver ordered rows in per-key order through leased lanes shared by
// every ordered worker on the same tables.
//
// Each instance keeps a membership lease ("member:<instance id>") alive on the
// database clock from its own goroutine, so slow sends never delay it, renewing
// it every third of the lease. Live members sorted by id divide the lanes by
// rank. Between renewals each instance reads the membership (writing nothing)
// every 500 ms, and at once when a sibling in its process tells it, so that a
// member that joins or leaves changes the split within about half a second.
// A Runner's ordered workers join together before any of them starts, so
// that each begins with its share rather than the first taking every lane
// and handing most of them over as the others join. A
// member that loses lanes releases their leases at its next probe, which the
// change triggers, and then tells the others: its siblings directly, other
// processes through the outbox's wake-up channel (RunnerOptions.Listen), so
// that the new owner takes them without waiting for its poll. A member that
// dies without leaving holds its lanes until its leases expire.
//
// A Runner's ordered workers are members each, with their own membership
// lease, name, share and counters, but they share one dispatch loop: its
// batches take the ready lanes of every worker's share together, so that
// lanes of several workers go in one transaction, and more workers in one
// process cost the database no more transactions than one. The loop's lane
// leases carry one token, each naming the worker whose share holds the lane
// as its owner; a worker that stops leaves its lanes to its siblings (the
// loop gives up those that go to other processes at its next probe), and the
// last one to stop releases every lane lease. The loop finds ready lanes
// two ways: the lanes a commit of this process touched (see
// [Runner.Committed]), which need no query, and a read-only probe of its
// lanes, run when it has nothing else to do, after a wake-up across
// processes, at each poll, and while busy at most every 20 ms, a gap that
// doubles up to the poll interval while probes find only lanes its own
// commits announced, and returns to 20 ms at the first other one. The probe
// reads each lane's head from the lane's cursor (see step 2 below), as a
// batch reads it, so that it too passes over no dead index entries of rows
// already delivered. It runs up to
// Concurrency batches at once per worker, each in a transaction on a
// connection of its own and over up to 16 ready lanes. A lane whose sends failed or were slow
// runs in a batch of its own on a free connection; the others go together:
// lanes that become ready while one of their batches runs wait for it to end
// and go in the next, unless they are half a batch or more (a backlog,
// taken 16 lanes a batch), since every transaction costs the database and
// small ones at once stretch every commit-to-send latency.
// Each step below is one statement for all of a batch's lanes:
//
//  1. take or renew the lane leases ("lane:<n>"): a conditional upsert that
//     succeeds only for leases free, expired or already this loop's, and
//     that keeps the lease rows locked until the transaction ends, so no
//     second connected owner can take a lane even after expiry (locked in
//     lane order, so that overlapping batches never deadlock). When the
//     loop renewed every one of the batch's leases within the last third
//     of the lease, under the same owner names, the batch locks the lease
//     rows the same way instead, writing nothing (store.Store.LockLaneLeases):
//     a busy lane's lease row then gets a new version every third of the
//     lease rather than every batch, so that a snapshot held open elsewhere
//     does not leave thousands of dead versions behind for every statement
//     that reads the leases to pass over. If a lease it locks is gone (an
//     operator released it), the batch rolls back and its lanes go again at
//     once, taking the leases anew;
//  2. read the held lanes' head rows in id order and admit, per lane, the
//     prefix before the first row that is not due or is claimed (a later row
//     never overtakes its head); the admitted rows need no claim of their
//     own, since the locked lease rows keep every other worker off them until
//     the transaction ends, so a delivered row is written once, by its delete.
//     A lane the worker keeps holding is read from a cursor: past the rows it already settled, plus the rows its last read's snapshot
//     did not see, whatever their ids, so that a read does not walk the dead
//     index entries delivered rows leave behind, which vacuum cannot remove
//     while a long transaction elsewhere holds an old snapshot. The read
//     starts from the lane's first entry when the lease changed hands, and
//     once a retry time of the lane's held keys has passed;
//  3. send each lane's rows one by one; a row that fails (or whose headers
//     do not decode) holds its key, whose later rows wait, while the lane's
//     other keys go on in the same batch; no new row is admitted after a
//     quarter of the lease has passed, or once the worker's context is
//     cancelled;
//  4. delete the sent rows with one DELETE, record the failed rows'
//     attempts and errors (parking those out of attempts, refused for good
//     or corrupt), each write fenced by the lane lease's owner token, leave
//     the rest as they are, and commit. If the
//     database cannot confirm this, the transaction rolls back and the
//     rows are sent again.
//
// A lane whose send failed or took over 100 ms a row runs in batches of its
// own until it sends cleanly, so that a slow or failing key holds up the
// other lanes of one batch at most once. A lane whose whole head was sent
// is batched again only when a commit wakes it or a probe finds it ready.
//
// The whole batch runs under a deadline of half the lease. A send still
// running at the deadline is cancelled, and the worker waits for the
// transport to return before it ends the transaction: the lane row stays
// locked, so no other owner sends the lane while a stale send may still reach
// the broker. While it waits it keeps the transaction alive with a trivial
// statement now and then; the session's idle_in_transaction_session_timeout
// (half the lease plus a few seconds) ends the transaction only when the
// worker itself stops answering, such as behind a network partition. A
// transport that ignores cancellation and never returns therefore holds its
// lane, and Stop, until it does: give transports their own timeouts.
//
// Keys map to lanes (relayer.Lane); the lane count is the outbox's
// (relayer.Outbox.Lanes), the one its writers hash keys with.
//
// # Recovery
//
// Recovery delivers the unordered rows nobody else will: rows whose direct
// dispatch failed, overflowed, was cancelled or died with its process, rows
// written by processes without a direct dispatcher, and rows scheduled for
// later, once due. It never touches ordered rows.
//
// One instance per outbox works at a time, holding a lease in the leases table
// (renewed from its own goroutine); others wait and take over when it expires.
// While it holds the lease, Workers goroutines take due rows in id order, up
// to BatchSize per statement, each take starting after the last row the
// previous one took (one shared cursor; the takes run one at a time while the
// sends and commits of the others go on). They send them grouped by
// (transport, destination) with the same protocol as direct dispatch: the take's
// transaction deletes the rows and commits once the broker has them, and
// writes back the ones it could not send. When a take finds nothing, the
// drainers go back to the beginning for rows behind the cursor (written back,
// or committed late) at most once per PollInterval, and otherwise wait
// PollInterval, or less when [Runner.Wake] is called. Rows handed over at
// commit (by a [Runner] without direct dispatch, or a direct dispatcher's
// overflow) move the cursor back to the first of them if it had passed it.
// Rows younger than MinAge are left to direct dispatch.
//
// # Retention
//
// Retention cleanup deletes what an outbox keeps only for a while: consumer inbox
// records older than InboxRetention and dead letters older than
// DeadRetention.
//
// One instance per outbox works at a time, holding a lease in the leases
// table; others skip their pass while it is held. A pass deletes the oldest
// expired rows of each table, at most BatchSize per statement, until a
// statement comes back short, renewing the lease every third of
// LeaseDuration; then the worker waits Interval. Cutoffs are taken from the
// database's clock, which stamped the rows. The statements skip rows other
// transactions hold locked rather than wait for them; the next pass takes them.
//
// The worker pins a connection from the pool for each pass, tuned like the
// other workers' (see Connections), and returns it between passes.
//
// # Connections
//
// Each worker pins connections from the application's *sql.DB for as long as
// it runs (direct dispatch: one per worker; recovery: one per drainer; an
// ordered worker: one per lane it runs at once, up to
// OrderedOptions.Concurrency), with asynchronous commit (synchronous_commit
// off for the session);
// leases and heartbeats borrow pooled connections briefly. Size the pool for
// them. Cleanup, and ordered workers' membership and leases on pooled
// connections, plan every statement for its values (custom plans). Direct
// dispatch and recovery run only takes on their connections, and ordered
// workers only their batches and probes; these keep generic plans with
// sequential scans off (plan_cache_mode and enable_seqscan set for the
// session): no planning per statement,
// which costs more than running one of these small statements, and index
// scans even for a plan made while the outbox was empty.
//
// While batches follow one another, direct dispatch and ordered workers end
// each transaction with COMMIT AND CHAIN, so that the next one needs no
// BEGIN. Monitoring therefore shows their sessions "idle in transaction"
// between batches, for up to a second after the last one: such a transaction
// has run no statement, holds no snapshot and no transaction id, and keeps
// nothing from vacuum.
//
// # Configuration
//
// Options structs are validated at construction; every field's zero value means
// its default. [LoadRunnerOptions] reads them from a [Source]: environment
// variables ([EnvSource]) or a map ([MapSource]).
package dispatch
