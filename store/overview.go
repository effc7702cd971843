package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/internal/storesql"
)

// Operator reads for consoles: the backlog by destination, the lanes, one
// message, and the table's activity counters. None is on a hot path; each is
// one statement.

// DestinationBacklog is one (transport, destination)'s share of the outbox at
// an instant, in the disjoint classes of [Stats], with its dead letters.
type DestinationBacklog struct {
	Transport, Destination string
	// Due counts the rows that may be sent now: eligible (Stats.Eligible)
	// and not blocked. Blocked counts the eligible ordered rows whose key is
	// held (Stats.Blocked): they wait for their key's parked head, or for its
	// head's retry, not for a worker. Scheduled counts those whose delivery
	// time is ahead; Claimed those being sent; Retrying those waiting for the
	// retry time of a failed send; Parked the parked rows; Dead the dead
	// letters.
	Due, Blocked, Scheduled, Claimed, Retrying, Parked, Dead int64
	// OldestDueAt is when the longest-waiting due row became deliverable
	// (see Stats.OldestDueAt), or zero. Blocked rows do not count: their
	// wait is their key's, which Parked and Retrying show.
	OldestDueAt time.Time
}

// Backlog is the outbox by destination, as [Store.Backlog] reads it.
type Backlog struct {
	Destinations []DestinationBacklog
	// Sample is the share of the outbox table's pages read for the counts of
	// due, scheduled and claimed rows and for each destination's
	// OldestDueAt, from 0 to 1; 1 means they are exact. Below 1 the counts
	// are estimates, scaled up from a random sample of pages. Retrying and
	// parked rows are always counted exactly.
	Sample float64
	// DeadSample is Sample for the dead letters.
	DeadSample float64
	// Total sums the destinations (Transport and Destination empty).
	Total DestinationBacklog
	// ParkedKeys counts the distinct parked keys, exactly.
	ParkedKeys int64
	// OldestDueAt is the due time of the first due row in id order, of the
	// unordered rows and of each lane, blocked rows passed over: the longest
	// wait, read exactly through the pending-row indexes whatever Sample is.
	// Zero when no row is due.
	OldestDueAt time.Time
}

// LaneSummary is one lane's pending ordered rows.
type LaneSummary struct {
	Lane int
	// Pending counts the lane's rows that are not parked and whose key is
	// not held; Blocked those that wait behind their key, a row of which is
	// parked, waiting for its retry or for a paused destination (both estimates when the
	// lanes were sampled). ParkedKeys counts its parked keys, exactly.
	Pending, Blocked, ParkedKeys int64
	// HeadCreatedAt is the creation time of the lane's first row in id
	// order that is neither parked nor behind a held key: the oldest row a
	// worker can send, or zero.
	HeadCreatedAt time.Time
}

type overviewQueries struct {
	sizes, backlog, failed, oldest, lanePending, laneParked, laneHeads, message, activity string
}

func buildOverviewQueries(n names) *overviewQueries {
	elig := storesql.Eligible("$1")
	eligO := strings.NewReplacer("parked_at", "o.parked_at", "deliver_at", "o.deliver_at", "retry_at", "o.retry_at",
		"claimed_until", "o.claimed_until").Replace(elig)
	unheldO := strings.ReplaceAll(storesql.Unheld(n.Outbox), "now()", "$1")
	// lanes walks the distinct lanes of the pending ordered rows, one
	// probe of the lane index each, however many rows they hold.
	lanes := `WITH RECURSIVE lanes(l) AS (
    SELECT min(lane) FROM ` + n.Outbox + ` WHERE lane IS NOT NULL AND parked_at IS NULL
    UNION ALL
    SELECT (SELECT min(lane) FROM ` + n.Outbox + `
        WHERE lane > lanes.l AND lane IS NOT NULL AND parked_at IS NULL)
    FROM lanes WHERE lanes.l IS NOT NULL)
`
	return &overviewQueries{
		sizes: `SELECT coalesce((SELECT reltuples FROM pg_class WHERE oid = to_regclass($1)), -1),
    coalesce((SELECT reltuples FROM pg_class WHERE oid = to_regclass($2)), -1)`,
		// Counts over a sample of $2 percent of the outbox's pages and $3
		// percent of the dead letters' (100: all), scaled back up.
		// The held keys are few and found through their index; the sample
		// joins them by hash to tell blocked rows from due ones.
		backlog: storesql.HeldKeys(n, "$1") + `SELECT coalesce(o.transport, d.transport), coalesce(o.destination, d.destination),
    coalesce(o.due, 0), coalesce(o.blocked, 0), coalesce(o.scheduled, 0), coalesce(o.claimed, 0), coalesce(d.dead, 0),
    o.oldest_due
FROM (
    SELECT s.transport, s.destination,
        round(count(*) FILTER (WHERE ` + elig + ` AND NOT ` + blockedRow + `) * 100 / $2::float8)::bigint AS due,
        round(count(*) FILTER (WHERE ` + elig + ` AND ` + blockedRow + `) * 100 / $2::float8)::bigint AS blocked,
        round(count(*) FILTER (WHERE parked_at IS NULL AND deliver_at > $1) * 100 / $2::float8)::bigint AS scheduled,
        round(count(*) FILTER (WHERE parked_at IS NULL AND (deliver_at IS NULL OR deliver_at <= $1)
            AND claimed_until > $1) * 100 / $2::float8)::bigint AS claimed,
        min(GREATEST(created_at, deliver_at)) FILTER (WHERE ` + elig + ` AND NOT ` + blockedRow + `) AS oldest_due
    FROM ` + n.Outbox + ` AS s TABLESAMPLE SYSTEM ($2)
    LEFT JOIN held AS h ON h.lane = s.lane AND h.ordering_key = s.ordering_key
    LEFT JOIN paused AS pd ON s.lane IS NULL AND pd.transport = s.transport AND pd.destination = s.destination
    GROUP BY s.transport, s.destination) AS o
FULL JOIN (
    SELECT transport, destination, round(count(*) * 100 / $3::float8)::bigint AS dead
    FROM ` + n.Dead + ` TABLESAMPLE SYSTEM ($3) GROUP BY transport, destination) AS d
  ON d.transport = o.transport AND d.destination = o.destination
ORDER BY 1, 2`,
		// The rows that failed, exactly, through the failed-row index.
		failed: `SELECT transport, destination,
    count(*) FILTER (WHERE parked_at IS NOT NULL),
    count(*) FILTER (WHERE parked_at IS NULL AND (deliver_at IS NULL OR deliver_at <= $1)
        AND (claimed_until IS NULL OR claimed_until <= $1) AND retry_at > $1),
    (SELECT count(DISTINCT (lane, ordering_key)) FROM ` + n.Outbox + `
        WHERE lane IS NOT NULL AND parked_at IS NOT NULL)
FROM ` + n.Outbox + ` WHERE parked_at IS NOT NULL OR retry_at IS NOT NULL
GROUP BY transport, destination`,
		oldest: lanes + `SELECT min(t) FROM (
    SELECT (SELECT GREATEST(created_at, deliver_at) FROM ` + n.Outbox + `
        WHERE lane IS NULL AND ` + elig + ` ORDER BY id LIMIT 1) AS t
    UNION ALL
    SELECT (SELECT GREATEST(o.created_at, o.deliver_at) FROM ` + n.Outbox + ` AS o
        WHERE o.lane = lanes.l AND o.lane IS NOT NULL AND ` + eligO + `
          AND ` + unheldO + ` ORDER BY o.id LIMIT 1)
    FROM lanes WHERE lanes.l IS NOT NULL) AS firsts`,
		// The held keys are few and found through their index; the sample
		// joins them by hash to tell blocked rows from pending ones.
		lanePending: storesql.HeldKeys(n, "now()") + `SELECT s.lane,
    round(count(*) FILTER (WHERE h.lane IS NULL) * 100 / $1::float8)::bigint,
    round(count(*) FILTER (WHERE h.lane IS NOT NULL) * 100 / $1::float8)::bigint
FROM ` + n.Outbox + ` AS s TABLESAMPLE SYSTEM ($1)
LEFT JOIN held AS h ON h.lane = s.lane AND h.ordering_key = s.ordering_key
WHERE s.lane IS NOT NULL AND s.parked_at IS NULL GROUP BY s.lane`,
		laneParked: `SELECT lane, count(DISTINCT ordering_key) FROM ` + n.Outbox + `
WHERE lane IS NOT NULL AND parked_at IS NOT NULL GROUP BY lane`,
		laneHeads: lanes + `SELECT lanes.l, (SELECT o.created_at FROM ` + n.Outbox + ` AS o
    WHERE o.lane = lanes.l AND o.lane IS NOT NULL AND o.parked_at IS NULL
      AND ` + storesql.Unheld(n.Outbox) + ` ORDER BY o.id LIMIT 1)
FROM lanes WHERE lanes.l IS NOT NULL`,
		message: `SELECT ` + storesql.RowColumns + `, parked_at FROM ` + n.Outbox + ` WHERE id = $1::text::uuid`,
		activity: `SELECT coalesce(sum(n_tup_ins), 0), coalesce(sum(n_tup_del), 0) FROM pg_stat_user_tables
WHERE schemaname = $1 AND relname = $2`,
	}
}

// samplePercent returns the share of a table's pages, in percent, whose rows
// number about sampleRows by the planner's estimate rows; 100 when the
// table has at most exactUpTo rows or was never analyzed.
func samplePercent(rows float64, exactUpTo, sampleRows int64) float64 {
	if rows < 0 || rows <= float64(exactUpTo) {
		return 100
	}
	return min(100, max(0.01, 100*float64(sampleRows)/rows))
}

// Backlog returns the outbox's rows at the instant now (zero means
// time.Now()) by (transport, destination), with the dead letters of each.
// Tables of at most exactUpTo rows (by the planner's estimate) are counted
// exactly; larger ones from a random sample of their pages holding about
// exactUpTo rows, so that the cost stays bounded whatever the backlog (see
// [Backlog.Sample]). Retrying and parked rows, the parked keys and the
// longest wait are exact in every case. exactUpTo must be positive.
func (s *Store) Backlog(ctx context.Context, now time.Time, exactUpTo int64) (Backlog, error) {
	const op = "backlog"
	if exactUpTo <= 0 {
		return Backlog{}, fmt.Errorf("%w: exactUpTo must be positive, got %d", ErrInvalidArgument, exactUpTo)
	}
	now = pgTime(now)
	n := newNames(s.opts)
	var outboxRows, deadRows float64
	if err := s.scanOne(ctx, op, s.oq.sizes, []any{n.Outbox, n.Dead}, &outboxRows, &deadRows); err != nil {
		return Backlog{}, err
	}
	pct, deadPct := samplePercent(outboxRows, exactUpTo, exactUpTo), samplePercent(deadRows, exactUpTo, exactUpTo)
	b := Backlog{Sample: pct / 100, DeadSample: deadPct / 100}

	rows, err := s.db.QueryContext(ctx, s.oq.backlog, now, pct, deadPct)
	if err != nil {
		return Backlog{}, wrap(ctx, op, err)
	}
	byDest := map[[2]string]int{}
	for rows.Next() {
		var d DestinationBacklog
		var oldest sql.NullTime
		if err := rows.Scan(&d.Transport, &d.Destination, &d.Due, &d.Blocked, &d.Scheduled, &d.Claimed, &d.Dead, &oldest); err != nil {
			rows.Close()
			return Backlog{}, wrap(ctx, op, err)
		}
		if oldest.Valid {
			d.OldestDueAt = oldest.Time.UTC()
		}
		byDest[[2]string{d.Transport, d.Destination}] = len(b.Destinations)
		b.Destinations = append(b.Destinations, d)
	}
	if err := rows.Close(); err != nil {
		return Backlog{}, wrap(ctx, op, err)
	}

	rows, err = s.db.QueryContext(ctx, s.oq.failed, now)
	if err != nil {
		return Backlog{}, wrap(ctx, op, err)
	}
	for rows.Next() {
		var transport, dest string
		var parked, retrying int64
		if err := rows.Scan(&transport, &dest, &parked, &retrying, &b.ParkedKeys); err != nil {
			rows.Close()
			return Backlog{}, wrap(ctx, op, err)
		}
		i, ok := byDest[[2]string{transport, dest}]
		if !ok {
			i = len(b.Destinations)
			b.Destinations = append(b.Destinations, DestinationBacklog{Transport: transport, Destination: dest})
		}
		b.Destinations[i].Parked, b.Destinations[i].Retrying = parked, retrying
	}
	if err := rows.Close(); err != nil {
		return Backlog{}, wrap(ctx, op, err)
	}
	slices.SortFunc(b.Destinations, func(x, y DestinationBacklog) int {
		return cmp.Or(cmp.Compare(x.Transport, y.Transport), cmp.Compare(x.Destination, y.Destination))
	})
	b.Destinations = slices.DeleteFunc(b.Destinations, func(d DestinationBacklog) bool {
		return d.Due+d.Blocked+d.Scheduled+d.Claimed+d.Retrying+d.Parked+d.Dead == 0 // a sampled count rounded down
	})
	for _, d := range b.Destinations {
		t := &b.Total
		t.Due, t.Blocked, t.Scheduled, t.Claimed, t.Retrying, t.Parked, t.Dead =
			t.Due+d.Due, t.Blocked+d.Blocked, t.Scheduled+d.Scheduled, t.Claimed+d.Claimed, t.Retrying+d.Retrying, t.Parked+d.Parked, t.Dead+d.Dead
	}

	var oldest sql.NullTime
	if err := s.scanOne(ctx, op, s.oq.oldest, []any{now}, &oldest); err != nil {
		return Backlog{}, err
	}
	if oldest.Valid {
		b.OldestDueAt, b.Total.OldestDueAt = oldest.Time.UTC(), oldest.Time.UTC()
	}
	return b, nil
}

// Lanes returns, for each lane that holds ordered rows, its pending and
// blocked rows, parked keys and the creation time of the first row a worker
// can send, in lane order. Pending and Blocked are counted exactly on an outbox of at most exactUpTo rows (by the planner's
// estimate), and estimated from a sample of pages holding about exactUpTo
// rows otherwise; the returned fraction is the share read (1: exact).
func (s *Store) Lanes(ctx context.Context, exactUpTo int64) ([]LaneSummary, float64, error) {
	const op = "lanes"
	if exactUpTo <= 0 {
		return nil, 0, fmt.Errorf("%w: exactUpTo must be positive, got %d", ErrInvalidArgument, exactUpTo)
	}
	n := newNames(s.opts)
	var outboxRows, deadRows float64
	if err := s.scanOne(ctx, op, s.oq.sizes, []any{n.Outbox, n.Dead}, &outboxRows, &deadRows); err != nil {
		return nil, 0, err
	}
	pct := samplePercent(outboxRows, exactUpTo, exactUpTo)
	byLane := map[int]*LaneSummary{}
	lane := func(l int) *LaneSummary {
		if byLane[l] == nil {
			byLane[l] = &LaneSummary{Lane: l}
		}
		return byLane[l]
	}
	for _, q := range []struct {
		query string
		args  []any
		scan  func(rows *sql.Rows) error
	}{
		{s.oq.lanePending, []any{pct}, func(rows *sql.Rows) error {
			var l int
			var pending, blocked int64
			err := rows.Scan(&l, &pending, &blocked)
			lane(l).Pending, lane(l).Blocked = pending, blocked
			return err
		}},
		{s.oq.laneParked, nil, func(rows *sql.Rows) error {
			var l int
			var c int64
			err := rows.Scan(&l, &c)
			lane(l).ParkedKeys = c
			return err
		}},
		{s.oq.laneHeads, nil, func(rows *sql.Rows) error {
			var l int
			var head sql.NullTime
			err := rows.Scan(&l, &head)
			if head.Valid {
				lane(l).HeadCreatedAt = head.Time.UTC()
			}
			return err
		}},
	} {
		rows, err := s.db.QueryContext(ctx, q.query, q.args...)
		if err != nil {
			return nil, 0, wrap(ctx, op, err)
		}
		for rows.Next() {
			if err := q.scan(rows); err != nil {
				rows.Close()
				return nil, 0, wrap(ctx, op, err)
			}
		}
		if err := rows.Close(); err != nil {
			return nil, 0, wrap(ctx, op, err)
		}
	}
	out := make([]LaneSummary, 0, len(byLane))
	for _, l := range byLane {
		if l.Pending == 0 && !l.HeadCreatedAt.IsZero() {
			l.Pending = 1 // it has a head: a sample missed its rows
		}
		out = append(out, *l)
	}
	slices.SortFunc(out, func(a, b LaneSummary) int { return a.Lane - b.Lane })
	return out, pct / 100, nil
}

// scanOne runs query, which returns one row, into dest.
func (s *Store) scanOne(ctx context.Context, op, query string, args []any, dest ...any) error {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return wrap(ctx, op, err)
	}
	if rows.Next() {
		err = rows.Scan(dest...)
	} else {
		err = errors.Join(rows.Err(), sql.ErrNoRows)
	}
	if cerr := rows.Close(); err == nil {
		err = cerr
	}
	return wrap(ctx, op, err)
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
	var sc storesql.Scratch
	var parked sql.NullTime
	if err := scanKeepingCorrupt(&sc, rows, &row, &parked); err != nil {
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
