package store

import (
	"context"
	"database/sql"
	"time"

	"github.com/relayer-go/relayer/internal/storesql"
)

// blockedRow is the predicate of a row (joined with held as h and paused
// as pd, see storesql.HeldKeys) that no worker can send before something
// else happens: an ordered row whose key is held, or an unordered row for a
// paused destination.
const blockedRow = `(h.lane IS NOT NULL OR pd.transport IS NOT NULL)`

// statsQueries holds the aggregate statement behind [Store.Stats]. Like
// queries, it is built once per store from validated names.
type statsQueries struct {
	stats        string
	deadByReason string
}

func buildStatsQueries(n names) *statsQueries {
	elig := storesql.Eligible("$1")
	// One pass over the outbox: every figure is a FILTER of the same scan, so
	// they describe one snapshot and cost one round trip. The dead letters are
	// counted by a scalar subquery in the same statement for the same reason.
	//
	// The FILTERs split the rows into five disjoint classes: parked; not parked
	// and not yet due (scheduled); due with a live claim (claimed); due,
	// unclaimed and waiting for the retry time of a failed send (retrying);
	// and the rest (eligible, exactly the rows CountEligible counts).
	//
	// A parked key is a (lane, ordering key) pair of ordered rows, the unit the
	// lane scan skips; parked unordered rows are counted as rows only. The
	// held keys (parked, waiting for a retry, or with a row for a paused
	// destination) are joined by hash to count the eligible rows they block,
	// and the paused destinations to count their unordered rows blocked too.
	return &statsQueries{
		deadByReason: `SELECT reason, count(*) FROM ` + n.Dead + ` GROUP BY reason ORDER BY reason`,
		stats: storesql.HeldKeys(n, "$1") + `SELECT
    count(*) FILTER (WHERE ` + elig + `),
    count(*) FILTER (WHERE ` + elig + ` AND ` + blockedRow + `),
    count(*) FILTER (WHERE parked_at IS NULL AND deliver_at > $1),
    count(*) FILTER (WHERE parked_at IS NULL AND (deliver_at IS NULL OR deliver_at <= $1)
        AND claimed_until > $1),
    count(*) FILTER (WHERE parked_at IS NULL AND (deliver_at IS NULL OR deliver_at <= $1)
        AND (claimed_until IS NULL OR claimed_until <= $1) AND retry_at > $1),
    min(retry_at) FILTER (WHERE parked_at IS NULL AND retry_at > $1),
    count(*) FILTER (WHERE parked_at IS NOT NULL),
    min(parked_at),
    count(DISTINCT (o.lane, o.ordering_key)) FILTER (WHERE parked_at IS NOT NULL AND o.lane IS NOT NULL),
    min(created_at) FILTER (WHERE ` + elig + ` AND NOT ` + blockedRow + `),
    min(GREATEST(created_at, deliver_at)) FILTER (WHERE ` + elig + ` AND NOT ` + blockedRow + `),
    (SELECT count(*) FROM ` + n.Dead + `)
FROM ` + n.Outbox + ` AS o LEFT JOIN held AS h ON h.lane = o.lane AND h.ordering_key = o.ordering_key
LEFT JOIN paused AS pd ON o.lane IS NULL AND pd.transport = o.transport AND pd.destination = o.destination`,
	}
}

// Stats is a snapshot of one outbox, taken by [Store.Stats] at an instant.
// Eligible, Scheduled, Claimed, Retrying and Parked are disjoint and together
// count every row of the outbox table.
type Stats struct {
	// Eligible counts the rows a read at the instant could return: not parked,
	// due, and unclaimed or with an expired claim. It equals what
	// [Store.CountEligible] returns for the same instant.
	Eligible int64
	// Blocked counts, of the Eligible rows, those no worker can send yet:
	// the ordered ones whose key is held (a row of the same key is parked,
	// waiting for its retry, or goes to a destination a worker has paused,
	// see [Store.Pauses]) and the unordered ones for a paused destination.
	// They wait for the key or the destination, not for a worker.
	Blocked int64
	// Scheduled counts the rows not parked whose delivery time is still ahead.
	Scheduled int64
	// Claimed counts the due rows not parked that a live claim holds: messages
	// being sent right now.
	Claimed int64
	// Retrying counts the due, unclaimed rows not parked that wait for the
	// retry time their last failed send set (relayer.Retry).
	Retrying int64
	// NextRetryAt is the earliest retry time still ahead, or zero.
	NextRetryAt time.Time
	// Parked counts the parked rows.
	Parked int64
	// OldestParkedAt is when the longest-parked row was parked, or zero.
	OldestParkedAt time.Time
	// ParkedKeys counts the distinct (lane, ordering key) pairs of parked
	// ordered rows: the keys whose delivery is stopped while their lane goes on.
	ParkedKeys int64
	// Dead counts the dead-letter rows.
	Dead int64
	// OldestCreatedAt is the creation time of the oldest eligible row that is
	// not blocked, or zero when there is none.
	OldestCreatedAt time.Time
	// OldestDueAt is the earliest instant from which an eligible row has been
	// deliverable: the later of its creation and its delivery time, minimised
	// over the eligible rows that are not blocked (a blocked row waits for
	// its key: ParkedKeys, OldestParkedAt and Retrying show that). Zero when
	// there is none. The instant minus
	// OldestDueAt is how long the longest-waiting message has waited for
	// delivery; unlike the age of OldestCreatedAt it does not count the time a
	// scheduled message was meant to wait.
	OldestDueAt time.Time
}

// Stats takes a [Stats] snapshot of the outbox at the instant now (zero means
// time.Now()), in one statement. The statement reads the whole outbox table,
// so its cost grows with the backlog: call it from monitoring at intervals,
// not per message. ctx bounds the statement. An error, including
// cancellation, is returned as such and never as zero counts.
func (s *Store) Stats(ctx context.Context, now time.Time) (Stats, error) {
	const op = "stats"
	rows, err := s.db.QueryContext(ctx, s.sq.stats, pgTime(now))
	if err != nil {
		return Stats{}, wrap(ctx, op, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return Stats{}, wrap(ctx, op, err)
		}
		return Stats{}, wrap(ctx, op, sql.ErrNoRows)
	}
	var (
		st                                                Stats
		oldestCreated, oldestDue, nextRetry, oldestParked sql.NullTime
	)
	if err := rows.Scan(&st.Eligible, &st.Blocked, &st.Scheduled, &st.Claimed, &st.Retrying, &nextRetry, &st.Parked, &oldestParked,
		&st.ParkedKeys, &oldestCreated, &oldestDue, &st.Dead); err != nil {
		return Stats{}, wrap(ctx, op, err)
	}
	if err := rows.Close(); err != nil {
		return Stats{}, wrap(ctx, op, err)
	}
	if oldestCreated.Valid {
		st.OldestCreatedAt = oldestCreated.Time.UTC()
	}
	if nextRetry.Valid {
		st.NextRetryAt = nextRetry.Time.UTC()
	}
	if oldestParked.Valid {
		st.OldestParkedAt = oldestParked.Time.UTC()
	}
	if oldestDue.Valid {
		st.OldestDueAt = oldestDue.Time.UTC()
	}
	return st, nil
}

// DeadByReason counts the dead letters by the reason they left delivery (a
// Reason* constant, or what an older writer stored).
func (s *Store) DeadByReason(ctx context.Context) (map[string]int64, error) {
	type count struct {
		reason string
		n      int64
	}
	counts, err := storesql.QueryRows(ctx, s.db, "dead letters by reason", s.sq.deadByReason, nil, func(rows *sql.Rows, c *count) error {
		return rows.Scan(&c.reason, &c.n)
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(counts))
	for _, c := range counts {
		out[c.reason] = c.n
	}
	return out, nil
}
