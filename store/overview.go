package store

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Operator reads for consoles: the backlog by destination, the lanes, one
// message, and the table's activity counters. None is on a hot path; each is
// one statement.

// DestinationBacklog is one (transport, destination)'s share of the outbox at
// an instant, in the disjoint classes of [Stats], with its dead letters.
type DestinationBacklog struct {
	Transport, Destination string
	// Due counts the rows that may be sent now (Stats.Eligible); Scheduled
	// those whose delivery time is ahead; Claimed those being sent; Retrying
	// those waiting for the retry time of a failed send; Parked the parked
	// rows; Dead the dead letters.
	Due, Scheduled, Claimed, Retrying, Parked, Dead int64
	// OldestDueAt is when the longest-waiting due row became deliverable
	// (see Stats.OldestDueAt), or zero.
	OldestDueAt time.Time
}

// LaneSummary is one lane's pending ordered rows.
type LaneSummary struct {
	Lane int
	// Pending counts the lane's rows that are not parked; ParkedKeys its
	// parked keys.
	Pending, ParkedKeys int64
	// HeadCreatedAt is the creation time of the lane's oldest row that is
	// not parked, or zero.
	HeadCreatedAt time.Time
}

type overviewQueries struct {
	backlog, lanes, message, activity string
}

func buildOverviewQueries(n names) *overviewQueries {
	elig := strings.ReplaceAll(eligible, "$now", "$1")
	return &overviewQueries{
		backlog: `SELECT coalesce(o.transport, d.transport), coalesce(o.destination, d.destination),
    coalesce(o.due, 0), coalesce(o.scheduled, 0), coalesce(o.claimed, 0), coalesce(o.retrying, 0),
    coalesce(o.parked, 0), coalesce(d.dead, 0), o.oldest_due
FROM (
    SELECT transport, destination,
        count(*) FILTER (WHERE ` + elig + `) AS due,
        count(*) FILTER (WHERE parked_at IS NULL AND deliver_at > $1) AS scheduled,
        count(*) FILTER (WHERE parked_at IS NULL AND (deliver_at IS NULL OR deliver_at <= $1)
            AND claimed_until > $1) AS claimed,
        count(*) FILTER (WHERE parked_at IS NULL AND (deliver_at IS NULL OR deliver_at <= $1)
            AND (claimed_until IS NULL OR claimed_until <= $1) AND retry_at > $1) AS retrying,
        count(*) FILTER (WHERE parked_at IS NOT NULL) AS parked,
        min(GREATEST(created_at, deliver_at)) FILTER (WHERE ` + elig + `) AS oldest_due
    FROM ` + n.outbox + ` GROUP BY transport, destination) AS o
FULL JOIN (
    SELECT transport, destination, count(*) AS dead FROM ` + n.dead + ` GROUP BY transport, destination) AS d
  ON d.transport = o.transport AND d.destination = o.destination
ORDER BY 1, 2`,
		lanes: `SELECT lane,
    count(*) FILTER (WHERE parked_at IS NULL),
    count(DISTINCT ordering_key) FILTER (WHERE parked_at IS NOT NULL),
    min(created_at) FILTER (WHERE parked_at IS NULL)
FROM ` + n.outbox + ` WHERE lane IS NOT NULL GROUP BY lane ORDER BY lane`,
		message: `SELECT ` + rowColumns + `, parked_at FROM ` + n.outbox + ` WHERE id = $1::text::uuid`,
		activity: `SELECT coalesce(sum(n_tup_ins), 0), coalesce(sum(n_tup_del), 0) FROM pg_stat_user_tables
WHERE schemaname = $1 AND relname = $2`,
	}
}

// Backlog returns the outbox's rows at the instant now (zero means
// time.Now()) by (transport, destination), with the dead letters of each,
// in one statement that reads both tables whole.
func (s *Store) Backlog(ctx context.Context, now time.Time) ([]DestinationBacklog, error) {
	const op = "backlog"
	rows, err := s.db.QueryContext(ctx, s.oq.backlog, pgTime(now))
	if err != nil {
		return nil, wrap(ctx, op, err)
	}
	defer rows.Close()
	var out []DestinationBacklog
	for rows.Next() {
		var b DestinationBacklog
		var oldest sql.NullTime
		if err := rows.Scan(&b.Transport, &b.Destination, &b.Due, &b.Scheduled, &b.Claimed, &b.Retrying,
			&b.Parked, &b.Dead, &oldest); err != nil {
			return nil, wrap(ctx, op, err)
		}
		if oldest.Valid {
			b.OldestDueAt = oldest.Time.UTC()
		}
		out = append(out, b)
	}
	return out, wrap(ctx, op, rows.Err())
}

// Lanes returns, for each lane that holds ordered rows, its pending rows,
// parked keys and the age of its oldest row, in lane order.
func (s *Store) Lanes(ctx context.Context) ([]LaneSummary, error) {
	const op = "lanes"
	rows, err := s.db.QueryContext(ctx, s.oq.lanes)
	if err != nil {
		return nil, wrap(ctx, op, err)
	}
	defer rows.Close()
	var out []LaneSummary
	for rows.Next() {
		var l LaneSummary
		var head sql.NullTime
		if err := rows.Scan(&l.Lane, &l.Pending, &l.ParkedKeys, &head); err != nil {
			return nil, wrap(ctx, op, err)
		}
		if head.Valid {
			l.HeadCreatedAt = head.Time.UTC()
		}
		out = append(out, l)
	}
	return out, wrap(ctx, op, rows.Err())
}

// Message returns the outbox row with id and when it was parked (zero if it
// is not), or found false when the outbox has no such row ([Store.DeadLetters]
// finds dead ones). A row whose headers do not decode has Corrupt set.
func (s *Store) Message(ctx context.Context, id uuid.UUID) (row Row, parkedAt time.Time, found bool, err error) {
	const op = "message"
	rows, err := s.db.QueryContext(ctx, s.oq.message, id.String())
	if err != nil {
		return Row{}, time.Time{}, false, wrap(ctx, op, err)
	}
	defer rows.Close()
	if !rows.Next() {
		return Row{}, time.Time{}, false, wrap(ctx, op, rows.Err())
	}
	var sc rowScratch
	var parked sql.NullTime
	if err := sc.scanKeepingCorrupt(rows, &row, &parked); err != nil {
		return Row{}, time.Time{}, false, wrap(ctx, op, err)
	}
	if parked.Valid {
		parkedAt = parked.Time.UTC()
	}
	return row, parkedAt, true, wrap(ctx, op, rows.Close())
}

// Activity returns how many rows have been inserted into and deleted from
// the outbox table since the server's statistics were last reset
// (pg_stat_user_tables): sampled over time, the rates of writing and of
// delivery (every delivered row is deleted). The counters lag by up to the
// server's stats flush interval, a second or so.
func (s *Store) Activity(ctx context.Context) (inserted, deleted int64, err error) {
	const op = "activity"
	rows, err := s.db.QueryContext(ctx, s.oq.activity, s.opts.Schema, s.opts.TablePrefix+"outbox")
	if err != nil {
		return 0, 0, wrap(ctx, op, err)
	}
	defer rows.Close()
	if rows.Next() {
		if err := rows.Scan(&inserted, &deleted); err != nil {
			return 0, 0, wrap(ctx, op, err)
		}
	}
	return inserted, deleted, wrap(ctx, op, rows.Err())
}
