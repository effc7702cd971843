package workerstore

import (
	"github.com/google/uuid"

	"github.com/relayer-go/relayer/internal/storesql"
	"github.com/relayer-go/relayer/internal/tables"
)

// queries holds the statements the workers run on one outbox, built once
// from validated names (package store builds the stable surface's from the
// same names).
type queries struct {
	takeIDs    string
	takeNext   string
	takeNextTo string
	restore    string
	bury       string

	acquireLease string
	releaseLease string
	releaseOwner string
	pruneMembers string

	laneProbe string
	laneHeads string
	// laneHeadsUnprobed is laneHeads for cursors with no ids to probe.
	laneHeadsUnprobed string
	// laneHeadsSorted is laneHeads with its rows sorted by lane and id, for
	// a read whose rows came in another order (see scanLaneReads).
	laneHeadsSorted string
	laneLeases      string
	laneLocks       string
	laneDelete      string
	// laneDeleteAll is laneDelete that fails unless it deletes every row
	// ($3 of them; see laneRowsGoneMark).
	laneDeleteAll string
	laneFail      string
	lanePark      string
	laneDefer     string
	beyondLanes   string
	serverTime    string
}

// serverLife names one life of the database server: it changes when the
// server restarts, and when it recovers from a crash without restarting
// (the cumulative statistics are discarded then, which resets the
// background writer's). A crash can lose the last commits of the workers'
// sessions, which commit asynchronously (see TuneWorkerConn): rows a lane
// cursor passed as delivered may be back, so a cursor made in another life
// of the server reads its lane from the start.
const serverLife = `pg_postmaster_start_time()::text || ' ' || coalesce(pg_stat_get_bgwriter_stat_reset_time()::text, '')`

// laneOwner fences a write to outbox rows o by the lease ls of their lane:
// held by the token in parameter token.
func laneOwner(token string) string {
	return `ls.name = '` + storesql.LaneLeasePrefix + `' || o.lane AND ls.owner_token = ` + token
}

// laneCursorArgs unnests the cursors a lane read starts from, one row l per
// lane: the parameters $1 to $10 of laneHeads and laneProbe.
const laneCursorArgs = `unnest($1::integer[], $2::text::uuid[], $3::text::xid8[], $4::text[], $5::text::timestamptz[], $6::text::timestamptz[],
    $7::text[], $8::text::xid8[], $9::text[], $10::text[]) AS l(lane, after, xmax, xip, retry, since, server, lowest, probes, held)`

// heldDigest sums up, for the lane l.lane, the keys held now (one of
// their rows parked, or waiting for its retry), from the held-key index
// alone: their number and the sum of a 32-bit hash of each (held; see
// heldKeyHash), and the earliest retry time still to come (next_retry). A
// cursor keeps the digest of the keys held once its read's transaction
// committed; a later read whose digest differs reads the lane from its
// start, since a key may have been released, by whatever program (an older
// release's redrive, an operator's UPDATE or DELETE among them), and the
// rows it hid, which the cursor passed, are eligible again.
const heldDigest = `SELECT count(*)::text || ':' || coalesce(sum(` + heldKeyHash + `), 0)::text AS held,
        min(k.next_retry) AS next_retry
    FROM (SELECT p.ordering_key, min(p.retry_at) FILTER (WHERE p.parked_at IS NULL) AS next_retry`

// heldKeyHash is the 32-bit hash of a held key k.ordering_key that
// heldDigest sums: the first four bytes of its MD5, as a signed integer
// (heldKeyHashOf computes the same in Go).
const heldKeyHash = `('x' || substr(md5(k.ordering_key), 1, 8))::bit(32)::integer`

// laneHeadsOf joins each lane l of laneCursorArgs to what its read from the
// cursor needs (s: the lease's acquired_at and the server's life; c: the
// cursor, where it still holds) and to its first limit head rows h, in id
// order (see laneHeads). Without probes it leaves out the read of the rows
// of the in-progress transactions a cursor probes one by one, which finds
// nothing unless a cursor has ids to probe (see narrowSnapshot): a smaller
// plan for PostgreSQL to start at every read.
func laneHeadsOf(n tables.Names, limit string, probes bool) string {
	probing := ""
	if probes {
		probing = `
    UNION ALL
    (SELECT y.* FROM unnest(c.probes) AS x(xact_id)
    CROSS JOIN LATERAL (SELECT ` + storesql.RowColumns + ` FROM ` + n.Outbox + ` AS o
        WHERE o.lane = l.lane AND o.xact_id = x.xact_id AND uuid_send(o.id) <= uuid_send(c.after) AND ` + storesql.Unheld(n.Outbox) + `
        OFFSET 0) AS y)`
	}
	return `CROSS JOIN LATERAL (SELECT
    (SELECT ls.acquired_at FROM ` + n.Leases + ` AS ls WHERE ls.name = '` + storesql.LaneLeasePrefix + `' || l.lane) AS since,
    ` + serverLife + ` AS server, hk.held, hk.next_retry
    FROM (` + heldDigest + ` FROM ` + n.Outbox + ` AS p
        WHERE p.lane = l.lane AND p.lane IS NOT NULL AND (p.parked_at IS NOT NULL OR p.retry_at > now())
        GROUP BY p.ordering_key) AS k) AS hk
    OFFSET 0) AS s
CROSS JOIN LATERAL (SELECT
    CASE WHEN k.keep THEN l.after END AS after,
    CASE WHEN k.keep THEN l.xmax END AS xmax,
    CASE WHEN k.keep THEN l.xip::xid8[] END AS xip,
    CASE WHEN k.keep THEN l.lowest END AS lowest,
    CASE WHEN k.keep THEN l.probes::xid8[] END AS probes
    FROM (SELECT s.since = l.since AND s.server = l.server AND s.held = l.held AND (l.retry IS NULL OR l.retry > now()) AS keep) AS k) AS c
CROSS JOIN LATERAL (
    (SELECT ` + storesql.RowColumns + ` FROM ` + n.Outbox + ` AS o
    WHERE o.lane = l.lane AND o.lane IS NOT NULL AND o.parked_at IS NULL
      AND o.id > coalesce(c.after, '` + uuid.Nil.String() + `')
      AND ` + storesql.Unheld(n.Outbox) + `
    ORDER BY o.id LIMIT ` + limit + `)
    UNION ALL
    (SELECT ` + storesql.RowColumns + ` FROM ` + n.Outbox + ` AS o
    WHERE o.lane = l.lane AND o.xact_id >= c.lowest AND uuid_send(o.id) <= uuid_send(c.after)
      AND (o.xact_id >= c.xmax OR o.xact_id = ANY(c.xip)) AND ` + storesql.Unheld(n.Outbox) + `)` + probing + `
    ORDER BY id LIMIT ` + limit + `) AS h`
}

// laneHeadsRead is a worker's read of its lanes' heads (laneHeads), with or
// without the probes of in-progress transactions (see laneHeadsOf). Unless
// sorted, it has no ORDER BY: its rows come lane after lane in the order of
// the cursors, each lane's in id order, as its nested loops produce them,
// which the scan checks (see scanLaneReads); sorting them cost a drain about
// a twelfth of its server time, copying every row, body included. The
// snapshot, the same for every row, is taken and formatted once (a
// subquery, which PostgreSQL runs once), not once a row.
func laneHeadsRead(n tables.Names, probes, sorted bool) string {
	q := `SELECT h.*, (SELECT pg_current_snapshot()::text), s.since, s.next_retry, s.server, s.held
FROM ` + laneCursorArgs + `
` + laneHeadsOf(n, "$11", probes)
	if sorted {
		q += `
ORDER BY h.lane, h.id`
	}
	return q
}

func buildQueries(n tables.Names) *queries {
	q := &queries{}
	q.buildTakes(n)
	q.buildLeases(n)
	q.buildLaneReads(n)
	q.buildLaneWrites(n)
	return q
}

// buildTakes sets the statements of unordered takes: take, restore, bury.
func (q *queries) buildTakes(n tables.Names) {
	elig := storesql.Eligible
	// nextUnordered selects and locks the ids of up to $2 eligible unordered
	// rows after the cursor $1, in id order, skipping rows other transactions
	// lock. Rows created after createdBefore are left to direct dispatch,
	// unless they were scheduled for later than their creation.
	//
	// A row stamped more than the minimum age (now - createdBefore) after
	// now was written by a writer whose clock runs ahead of the database's:
	// its age is unknown, and it is taken like an old one, so that a skewed
	// writer's rows are not left waiting for its lead. (Rows stamped just
	// after now are fresh rows of a writer a little ahead, or of clock
	// measurement noise: they stay with direct dispatch.)
	// A row that failed before (retry_at set) is recovery's whatever its age.
	// With skipTransports and skipDestinations (parallel text arrays), rows of
	// those endpoints are passed over.
	nextUnordered := func(now, createdBefore, skipTransports, skipDestinations string) string {
		skip := ""
		if skipTransports != "" {
			skip = `
      AND (transport, destination) NOT IN (SELECT * FROM unnest(` + skipTransports + `::text::text[], ` + skipDestinations + `::text::text[]))`
		}
		return `
    SELECT id FROM ` + n.Outbox + `
    WHERE lane IS NULL AND id > $1 AND ` + elig(now) + `
      AND (created_at <= ` + createdBefore + ` OR deliver_at > created_at OR retry_at IS NOT NULL
           OR created_at > ` + now + ` + (` + now + ` - ` + createdBefore + `))` + skip + `
    ORDER BY id LIMIT $2
    FOR UPDATE SKIP LOCKED`
	}
	// Takes delete inside the caller's transaction (see take.go). The inner
	// SELECT skips rows other transactions lock; ANY(ARRAY(...)) keeps the
	// DELETE a primary-key probe in every plan.
	q.takeIDs = `DELETE FROM ` + n.Outbox + `
WHERE id = ANY(ARRAY(
    SELECT id FROM ` + n.Outbox + `
    WHERE id = ANY($1::text::uuid[]) AND lane IS NULL AND ` + elig("$2") + `
    FOR UPDATE SKIP LOCKED))
RETURNING id, attempts, last_error`
	q.takeNext = `DELETE FROM ` + n.Outbox + `
WHERE id = ANY(ARRAY(` + nextUnordered("$3", "$4", "$5", "$6") + `))
RETURNING ` + storesql.RowColumns
	q.takeNextTo = `DELETE FROM ` + n.Outbox + `
WHERE id = ANY(ARRAY(
    SELECT id FROM ` + n.Outbox + `
    WHERE lane IS NULL AND transport = $1 AND destination = $2 AND ` + elig("$4") + `
    ORDER BY id LIMIT $3
    FOR UPDATE SKIP LOCKED))
RETURNING ` + storesql.RowColumns
	q.restore = `INSERT INTO ` + n.Outbox + ` (id, message_type, transport, destination, body, headers,
    ordering_key, lane, created_at, deliver_at, trace_parent, trace_state, attempts, last_error, retry_at)
SELECT * FROM unnest($1::text::uuid[], $2::text::text[], $3::text::text[], $4::text::text[], $5::text::bytea[],
    $6::text::bytea[], $7::text::text[], $8::text::integer[], $9::text::timestamptz[], $10::text::timestamptz[],
    $11::text::text[], $12::text::text[], $13::text::integer[], $14::text::text[], $15::text::timestamptz[])`
	// Dead letters are written by the transaction that took their rows
	// out of the outbox. A dead letter with the same id (one requeued
	// and dead again) is replaced, never lost.
	q.bury = `INSERT INTO ` + n.Dead + ` AS d (id, message_type, transport, destination, body, headers,
    ordering_key, lane, created_at, deliver_at, trace_parent, trace_state, attempts, last_error, reason)
SELECT * FROM unnest($1::text::uuid[], $2::text::text[], $3::text::text[], $4::text::text[], $5::text::bytea[],
    $6::text::bytea[], $7::text::text[], $8::text::integer[], $9::text::timestamptz[], $10::text::timestamptz[],
    $11::text::text[], $12::text::text[], $13::text::integer[], $14::text::text[], $15::text::text[])
ON CONFLICT (id) DO UPDATE SET message_type = EXCLUDED.message_type, transport = EXCLUDED.transport,
    destination = EXCLUDED.destination, body = EXCLUDED.body, headers = EXCLUDED.headers,
    ordering_key = EXCLUDED.ordering_key, lane = EXCLUDED.lane, created_at = EXCLUDED.created_at,
    deliver_at = EXCLUDED.deliver_at, trace_parent = EXCLUDED.trace_parent, trace_state = EXCLUDED.trace_state,
    attempts = EXCLUDED.attempts, last_error = EXCLUDED.last_error, reason = EXCLUDED.reason, dead_at = now()`
}

// buildLeases sets the statements of leases, and the read of the server's clock.
func (q *queries) buildLeases(n tables.Names) {
	// Leases run on the database clock, so that workers with skewed clocks
	// agree on expiry. A lease is taken when free or expired, and renewed by
	// its owner token.
	q.acquireLease = `INSERT INTO ` + n.Leases + ` AS l (name, owner, owner_token, acquired_at, expires_at)
VALUES ($1, $2, $3, now(), now() + $4 * interval '1 microsecond')
ON CONFLICT (name) DO UPDATE
SET owner = EXCLUDED.owner, owner_token = EXCLUDED.owner_token,
    acquired_at = CASE WHEN l.owner_token = EXCLUDED.owner_token THEN l.acquired_at ELSE now() END,
    expires_at = EXCLUDED.expires_at
WHERE l.owner_token = EXCLUDED.owner_token OR l.expires_at <= now()
RETURNING expires_at`
	q.releaseLease = `DELETE FROM ` + n.Leases + ` WHERE name = $1 AND owner_token = $2`
	q.serverTime = `SELECT clock_timestamp()`
	q.releaseOwner = `DELETE FROM ` + n.Leases + ` WHERE owner_token = $1`
	q.pruneMembers = `DELETE FROM ` + n.Leases + ` WHERE name LIKE '` + storesql.MemberLeasePrefix + `%' AND expires_at <= now()`
}

// buildLaneReads sets the ordered lanes' reads: probe, heads, rows beyond the lanes.
func (q *queries) buildLaneReads(n tables.Names) {
	// Ordered lanes. The probe is read-only: for each lane it finds the
	// first row that is not parked and whose key has no parked row nor
	// one waiting for its retry (the head), read from the lane's cursor
	// as laneHeads reads it, so that a probe walks no more dead index
	// entries than a batch's read; and it returns the lane only when that
	// head is unclaimed and the lane's lease is free, expired or already
	// the caller's ($11). Empty lanes, and lanes whose head another
	// program claimed, therefore cost no lease writes. A head scheduled
	// for later makes its lane ready: the batch makes it hold its key
	// until its time (DeferLaneRows), after which it is no lane's head.
	q.laneProbe = `SELECT l.lane FROM ` + laneCursorArgs + `
` + laneHeadsOf(n, "1", true) + `
LEFT JOIN ` + n.Leases + ` AS ls ON ls.name = '` + storesql.LaneLeasePrefix + `' || l.lane
WHERE (h.claimed_until IS NULL OR h.claimed_until <= now())
  AND (ls.name IS NULL OR ls.owner_token = $11 OR ls.expires_at <= now())
ORDER BY l.lane`
	// The head rows of lanes, each lane's in id order, lane after lane,
	// due or not, claimed or not: the caller admits the prefix before
	// the first row it may not send yet, so no row ever overtakes its
	// head. Each lane is read from its cursor (see LaneCursor): the
	// rows after the cursor's id, from the lane index, and the rows at
	// or before it that the cursor's snapshot did not see (xact_id at or
	// past its xmax, or among its in-progress ids), from the xact index;
	// then the first $11 of them in id order. The xact index is walked
	// from the snapshot's xmin ($8) when the snapshot spans few
	// transaction ids, and otherwise from its xmax, with one probe per
	// in-progress id ($9): one range is cheaper than a probe per
	// concurrent writer, while a transaction left open after writing
	// would make that range grow without bound. A lane
	// is read from its start when it has no cursor, when its lease
	// changed hands since the cursor was made (acquired_at differs), or
	// when the cursor's retry time has passed, or when the lane's held
	// rows differ from those the cursor's snapshot saw (see heldDigest):
	// a held key hides its rows from reads, so rows at or before the
	// cursor may have come back. Every row carries the statement's snapshot, the
	// lane's lease acquired_at, and its earliest retry time still to
	// come, on the database clock the held-key test uses, and the life
	// of the server (see serverLife), since a cursor cannot outlive it. The rows the
	// snapshot did not see are kept to those at or before the cursor
	// (later ones come from the lane index) inside the xact index, which
	// holds ids in their binary form (uuid_send, which sorts as uuid
	// does). Neither the lane index nor the primary key can serve these
	// two reads (the former's predicate, parked_at IS NULL, is not
	// stated: the held-key test already leaves parked rows out; the
	// latter knows no uuid_send), so that no plan, whatever the
	// statistics, walks the dead entries below the cursor.
	q.laneHeads = laneHeadsRead(n, true, false)
	q.laneHeadsUnprobed = laneHeadsRead(n, false, false)
	q.laneHeadsSorted = laneHeadsRead(n, true, true)
	// Rows whose lane is at or past a worker's lane count, written by
	// writers configured with more lanes than the worker, or negative,
	// written by another program: they are never scanned. Bounded, so
	// that a large mismatch costs little to report.
	q.beyondLanes = `SELECT count(*) FROM (SELECT 1 FROM ` + n.Outbox + `
    WHERE (lane >= $1 OR lane < 0) AND parked_at IS NULL LIMIT 10000) AS b`
}

// buildLaneWrites sets the ordered lanes' writes under their leases.
func (q *queries) buildLaneWrites(n tables.Names) {
	// acquireLease for several lanes at once, in lane order, so that two
	// callers whose lanes overlap lock the lease rows in the same order
	// and never deadlock. It returns the lanes now held.
	q.laneLeases = `INSERT INTO ` + n.Leases + ` AS l (name, owner, owner_token, acquired_at, expires_at)
SELECT '` + storesql.LaneLeasePrefix + `' || x.lane, x.owner, $3, now(), now() + $4 * interval '1 microsecond'
FROM unnest($1::integer[], $2::text[]) AS x(lane, owner) ORDER BY x.lane
ON CONFLICT (name) DO UPDATE
SET owner = EXCLUDED.owner, owner_token = EXCLUDED.owner_token,
    acquired_at = CASE WHEN l.owner_token = EXCLUDED.owner_token THEN l.acquired_at ELSE now() END,
    expires_at = EXCLUDED.expires_at
WHERE l.owner_token = EXCLUDED.owner_token OR l.expires_at <= now()
RETURNING substr(l.name, 6)::integer`
	// The leases of lanes ($1) that token $2 holds until at least $3
	// microseconds from now, locked in lane order as laneLeases locks
	// them, so that the two never deadlock, and not written: a holder that
	// renewed its leases a moment ago keeps them for a batch at the cost
	// of a row lock rather than a new row version each, which an old
	// snapshot held elsewhere would keep from vacuum.
	q.laneLocks = `SELECT substr(ls.name, 6)::integer AS lane FROM ` + n.Leases + ` AS ls
WHERE ls.name = ANY(ARRAY(SELECT '` + storesql.LaneLeasePrefix + `' || x FROM unnest($1::integer[]) AS x))
  AND ls.owner_token = $2 AND ls.expires_at > statement_timestamp() + $3 * interval '1 microsecond'
ORDER BY 1 FOR NO KEY UPDATE OF ls`
	// Settling rows read under their lanes' leases in the same
	// transaction: the lease rows stay locked until it ends, so no other
	// worker can send or change these rows, and no claim is needed (an
	// UPDATE per row that would leave one more dead row version behind
	// every delivered message). Each write is fenced by the lane owner's
	// token all the same. No lane predicate, as for laneClaim; the ids
	// are matched with = ANY as well as joined, so that every plan, a
	// generic one made while the outbox was empty included, probes the
	// primary key for them.
	q.laneDelete = `DELETE FROM ` + n.Outbox + ` AS o USING ` + n.Leases + ` AS ls
WHERE o.id = ANY($1::text::uuid[]) AND ` + laneOwner("$2")
	q.laneFail = `UPDATE ` + n.Outbox + ` AS o
SET attempts = o.attempts + 1, last_error = f.error, retry_at = f.retry_at
FROM unnest($1::text::uuid[], $2::text::text[], $3::text::timestamptz[]) AS f(id, error, retry_at), ` + n.Leases + ` AS ls
WHERE o.id = ANY($1::text::uuid[]) AND o.id = f.id AND ` + laneOwner("$4")
	// A scheduled ordered row made to hold its key until its time, as a
	// waiting retry does: attempts and last error untouched.
	q.laneDefer = `UPDATE ` + n.Outbox + ` AS o
SET retry_at = f.retry_at
FROM unnest($1::text::uuid[], $2::text::timestamptz[]) AS f(id, retry_at), ` + n.Leases + ` AS ls
WHERE o.id = ANY($1::text::uuid[]) AND o.id = f.id AND ` + laneOwner("$3")
	q.lanePark = `UPDATE ` + n.Outbox + ` AS o
SET attempts = o.attempts + 1, last_error = f.error, parked_at = now()
FROM unnest($1::text::uuid[], $2::text::text[]) AS f(id, error), ` + n.Leases + ` AS ls
WHERE o.id = ANY($1::text::uuid[]) AND o.id = f.id AND ` + laneOwner("$3")
	// The cast fails with a message naming the counts (laneRowsGoneMark).
	q.laneDeleteAll = `WITH d AS (` + q.laneDelete + `
RETURNING 1)
SELECT CASE WHEN count(*) = $3 THEN count(*)
    ELSE ('` + laneRowsGoneMark + `' || count(*) || ' of ' || $3)::bigint END FROM d`
}
