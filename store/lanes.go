package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Ordered lanes: the statements an ordered dispatcher runs. Lane and member
// leases live in the leases table under the names "lane:<n>" and
// "member:<instance>".

// The names of the singleton workers' leases, which let one recovery and
// one cleanup instance per outbox work at a time.
const (
	RecoveryLeaseName = "recovery"
	CleanupLeaseName  = "cleanup"
)

// The prefixes of lane and member lease names; the statements that build or
// match such names in SQL use them too.
const (
	laneLeasePrefix   = "lane:"
	memberLeasePrefix = "member:"
)

// LaneLeaseName returns the lease name of a lane.
func LaneLeaseName(lane int) string { return laneLeasePrefix + strconv.Itoa(lane) }

// MemberLeaseName returns the lease name of a worker instance.
func MemberLeaseName(instance string) string { return memberLeasePrefix + instance }

// Lane returns the lane whose lease l is, or ok false when l is not a lane's
// lease (see [LaneLeaseName]).
func (l LeaseRow) Lane() (lane int, ok bool) {
	rest, ok := strings.CutPrefix(l.Name, laneLeasePrefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 || strconv.Itoa(n) != rest {
		return 0, false // not a name LaneLeaseName writes
	}
	return n, true
}

// Member returns the worker instance whose membership lease l is, or ok false
// when l is not a membership lease (see [MemberLeaseName]).
func (l LeaseRow) Member() (instance string, ok bool) {
	return strings.CutPrefix(l.Name, memberLeasePrefix)
}

// ProbeLanes returns, in one read-only statement, those lanes of from whose
// head (first row that is not parked and whose key has no parked row nor one
// waiting for its retry) is unclaimed, due or not, and whose lease is free,
// expired, or held by token, in ascending order: a head scheduled for later
// is for the batch to make hold its key ([Store.DeferLaneRows]). It writes
// nothing, so empty lanes cost no lease writes. Each lane's head is read from its
// cursor, as [Store.ReadLanes] reads it ([NewLaneCursor] reads from the
// lane's start): a worker probing the lanes it holds walks no more of the
// dead index entries its deliveries left behind than its reads do.
func (s *Store) ProbeLanes(ctx context.Context, from []LaneCursor, token uuid.UUID) ([]int, error) {
	if len(from) == 0 {
		return nil, nil
	}
	return queryRows(ctx, s.db, "probe lanes", s.q.laneProbe, append(cursorArgs(from), token.String()), func(rows *sql.Rows, l *int) error {
		return rows.Scan(l)
	})
}

// ReadLaneHeads appends to dst[:0], in one statement, the first limit rows
// of each of lanes, read from the lane's start: [Store.ReadLanes] with new
// cursors.
func (s *Store) ReadLaneHeads(ctx context.Context, dst []Row, lanes []int, limit int) ([]Row, error) {
	from := make([]LaneCursor, len(lanes))
	for i, l := range lanes {
		from[i] = NewLaneCursor(l)
	}
	rows, _, err := s.ReadLanes(ctx, dst, from, limit)
	return rows, err
}

// AcquireLaneLeases is [Store.AcquireLease] for the leases of several lanes
// (see [LaneLeaseName]) in one statement: it takes each for d when it is
// free or expired, or renews it when token holds it, and returns the lanes
// token holds now, in ascending order. Inside a transaction the lease rows
// stay locked until it ends; they are locked in lane order, so that callers
// whose lanes overlap never deadlock.
func (s *Store) AcquireLaneLeases(ctx context.Context, lanes []int, owner string, token uuid.UUID, d time.Duration) ([]int, error) {
	owners := make([]string, len(lanes))
	for i := range owners {
		owners[i] = owner
	}
	return s.AcquireLaneLeasesFor(ctx, lanes, owners, token, d)
}

// AcquireLaneLeasesFor is [Store.AcquireLaneLeases] with an owner name per
// lane: owners[i] is recorded as the owner of lanes[i]. One token may hold
// lanes on behalf of several named workers, as a Runner's ordered workers
// share theirs; a lease renewed under another name keeps its acquired_at.
func (s *Store) AcquireLaneLeasesFor(ctx context.Context, lanes []int, owners []string, token uuid.UUID, d time.Duration) ([]int, error) {
	if token == uuid.Nil {
		return nil, fmt.Errorf("%w: a lease needs a token", ErrInvalidArgument)
	}
	if d < time.Millisecond {
		return nil, fmt.Errorf("%w: lease duration %s is under 1ms", ErrInvalidArgument, d)
	}
	if len(owners) != len(lanes) {
		return nil, fmt.Errorf("%w: %d owners for %d lanes", ErrInvalidArgument, len(owners), len(lanes))
	}
	if len(lanes) == 0 {
		return nil, nil
	}
	var names arrayLiteral
	for _, o := range owners {
		names.text(cleanText(o), false)
	}
	rows, err := s.db.QueryContext(ctx, s.q.laneLeases, intArray(lanes), names.String(), token.String(), d.Microseconds())
	if err != nil {
		return nil, wrap(ctx, "acquire lane leases", err)
	}
	defer rows.Close()
	held := make([]int, 0, len(lanes))
	for rows.Next() {
		var lane int
		if err := rows.Scan(&lane); err != nil {
			return nil, wrap(ctx, "acquire lane leases", err)
		}
		held = append(held, lane)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(ctx, "acquire lane leases", err)
	}
	slices.Sort(held)
	return held, wrap(ctx, "acquire lane leases", rows.Close())
}

// LockLaneLeases locks, in one statement, the leases of those of lanes that
// token holds for at least min more on the database clock, without writing
// them, and returns those lanes in ascending order. Like
// [Store.AcquireLaneLeasesFor], inside a transaction it keeps the lease rows
// locked until the transaction ends, in lane order, so that the two never
// deadlock; unlike it, it neither takes nor renews a lease. A holder that
// renewed its leases a moment ago locks them this way for a batch: a row
// lock instead of a new row version per lease, which matters when an old
// snapshot held elsewhere keeps vacuum from removing the old versions.
func (s *Store) LockLaneLeases(ctx context.Context, lanes []int, token uuid.UUID, min time.Duration) ([]int, error) {
	if err := validLaneLock(token, min); err != nil {
		return nil, err
	}
	if len(lanes) == 0 {
		return nil, nil
	}
	return queryRows(ctx, s.db, "lock lane leases", s.q.laneLocks, s.laneLockArgs(lanes, token, min), func(rows *sql.Rows, l *int) error {
		return rows.Scan(l)
	})
}

// validLaneLock checks the arguments of a lock of lane leases.
func validLaneLock(token uuid.UUID, min time.Duration) error {
	if token == uuid.Nil {
		return fmt.Errorf("%w: a lease needs a token", ErrInvalidArgument)
	}
	if min < 0 {
		return fmt.Errorf("%w: negative time left %s", ErrInvalidArgument, min)
	}
	return nil
}

// laneLockArgs are the parameters of laneLocks.
func (s *Store) laneLockArgs(lanes []int, token uuid.UUID, min time.Duration) []any {
	return []any{intArray(lanes), token.String(), min.Microseconds()}
}

// ClaimLaneRows claims rows by id (ids read from lanes under their locks) in
// one statement, those that are eligible at now, and returns how many it
// claimed.
func (s *Store) ClaimLaneRows(ctx context.Context, ids []uuid.UUID, c Claim, now time.Time) (int64, error) {
	now = pgTime(now)
	if err := c.validate(now); err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil
	}
	return s.affected(ctx, "claim lane rows", s.q.laneClaim, uuidArray(ids), c.Token, pgTime(c.Until), now)
}

// DeleteLaneRows deletes rows by id that the caller read from lanes whose
// leases it holds with token in the same transaction, and returns how many
// it deleted. [Store.AcquireLaneLeases] keeps the lease rows locked until
// the transaction ends, so no other worker sends or changes the rows
// meanwhile and they need no claim: the ordered worker settles its batches
// this way, writing each delivered row once (its delete) instead of twice.
// A row whose lane's lease token does not hold is left alone.
func (s *Store) DeleteLaneRows(ctx context.Context, ids []uuid.UUID, token uuid.UUID) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	return s.affected(ctx, "delete lane rows", s.q.laneDelete, uuidArray(ids), token.String())
}

// FailLaneRows is [Store.FailBatch] for rows read under their lanes' leases,
// held with token in the same transaction, as for [Store.DeleteLaneRows]: it
// records each failure (attempts, last error, retry time) and returns how
// many rows it changed.
func (s *Store) FailLaneRows(ctx context.Context, failures []Failure, token uuid.UUID) (int64, error) {
	if len(failures) == 0 {
		return 0, nil
	}
	ids, texts, retryAt := failureArrays(failures)
	return s.affected(ctx, "fail lane rows", s.q.laneFail, uuidArray(ids), texts, retryAt, token.String())
}

// ParkLaneRows is [Store.Park] for rows read under their lanes' leases,
// held with token in the same transaction, as for [Store.DeleteLaneRows]:
// each row is parked with its key, and it returns how many rows it changed.
func (s *Store) ParkLaneRows(ctx context.Context, failures []Failure, token uuid.UUID) (int64, error) {
	if len(failures) == 0 {
		return 0, nil
	}
	ids, texts, _ := failureArrays(failures)
	return s.affected(ctx, "park lane rows", s.q.lanePark, uuidArray(ids), texts, token.String())
}

// DeferLaneRows makes scheduled ordered rows, read under their lanes'
// leases held with token in the same transaction (as for
// [Store.DeleteLaneRows]), hold their keys until their delivery time, as a
// row waiting for its retry holds its key: each row's retry time is set to
// its Failure's RetryAt (its delivery time), its attempts and last error
// are left as they were. The lane's other keys go on meanwhile. It returns
// how many rows it changed; a zero RetryAt is refused, since it would hold
// nothing.
func (s *Store) DeferLaneRows(ctx context.Context, rows []Failure, token uuid.UUID) (int64, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	for _, f := range rows {
		if f.RetryAt.IsZero() {
			return 0, fmt.Errorf("%w: deferring row %s needs a time", ErrInvalidArgument, f.ID)
		}
	}
	ids, _, until := failureArrays(rows)
	return s.affected(ctx, "defer lane rows", s.q.laneDefer, uuidArray(ids), until, token.String())
}

// ReleaseLeases deletes every lease held by token: a worker's membership and
// lanes, on graceful stop.
func (s *Store) ReleaseLeases(ctx context.Context, token uuid.UUID) error {
	_, err := s.db.ExecContext(ctx, s.q.releaseOwner, token)
	return wrap(ctx, "release leases", err)
}

// Members returns the live members' lease names in sorted order, writing
// nothing: what a worker reads between heartbeats to see members join and
// leave.
func (s *Store) Members(ctx context.Context) ([]string, error) {
	return queryRows(ctx, s.db, "live members", s.q.liveMembers, nil, func(rows *sql.Rows, name *string) error {
		return rows.Scan(name)
	})
}

// Heartbeat renews a worker's membership lease for d, removes expired member
// rows, and returns the live members' lease names in sorted order.
func (s *Store) Heartbeat(ctx context.Context, member Lease, d time.Duration) ([]string, error) {
	held, _, err := s.AcquireLease(ctx, member, d)
	if err != nil {
		return nil, err
	}
	if !held {
		return nil, fmt.Errorf("store: heartbeat: membership %q is held by another token", member.Name)
	}
	if _, err := s.db.ExecContext(ctx, s.q.pruneMembers); err != nil {
		return nil, wrap(ctx, "prune members", err)
	}
	return s.Members(ctx)
}

// RowsBeyondLanes counts, up to 10,000, the pending rows whose lane is lanes
// or more, or negative: rows that a worker configured with lanes lanes never
// scans, because their writer hashed keys into more lanes or another program
// wrote them.
func (s *Store) RowsBeyondLanes(ctx context.Context, lanes int) (int64, error) {
	return s.count(ctx, "rows beyond lanes", s.q.beyondLanes, lanes)
}

// ServerTime returns the database server's current time (clock_timestamp()).
// Workers compare it with their own clock to judge eligibility on the
// database's clock, the one every writer and worker shares.
func (s *Store) ServerTime(ctx context.Context) (time.Time, error) {
	rows, err := s.db.QueryContext(ctx, s.q.serverTime)
	if err != nil {
		return time.Time{}, wrap(ctx, "server time", err)
	}
	defer rows.Close()
	var t time.Time
	if !rows.Next() {
		return time.Time{}, wrap(ctx, "server time", errors.Join(rows.Err(), sql.ErrNoRows))
	}
	if err := rows.Scan(&t); err != nil {
		return time.Time{}, wrap(ctx, "server time", err)
	}
	return t, wrap(ctx, "server time", rows.Close())
}

// intArray returns ints as a PostgreSQL array literal, which every driver
// passes as text.
func intArray(ints []int) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range ints {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(n))
	}
	b.WriteByte('}')
	return b.String()
}
