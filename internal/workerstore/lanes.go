package workerstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/internal/storesql"
	"github.com/relayer-go/relayer/store"
)

// Ordered lanes: the statements an ordered dispatcher runs. Lane and member
// leases live in the leases table under the names "lane:<n>" and
// "member:<instance>" (see store.LeaseRow).

// LaneLeaseName returns the lease name of a lane.
func LaneLeaseName(lane int) string { return storesql.LaneLeasePrefix + strconv.Itoa(lane) }

// MemberLeaseName returns the lease name of a worker instance.
func MemberLeaseName(instance string) string { return storesql.MemberLeasePrefix + instance }

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
	return storesql.QueryRows(ctx, s.db, "probe lanes", s.q.laneProbe, append(cursorArgs(from), token.String()), func(rows *sql.Rows, l *int) error {
		return rows.Scan(l)
	})
}

// AcquireLaneLeasesFor is [Store.AcquireLease] for the leases of several
// lanes (see [LaneLeaseName]) in one statement, with an owner name per lane:
// owners[i] is recorded as the owner of lanes[i]. It takes each for d when
// it is free or expired, or renews it when token holds it, and returns the
// lanes token holds now, in ascending order. One token may hold lanes on
// behalf of several named workers, as a Runner's ordered workers share
// theirs; a lease renewed under another name keeps its acquired_at. Inside
// a transaction the lease rows stay locked until it ends; they are locked in
// lane order, so that callers whose lanes overlap never deadlock.
func (s *Store) AcquireLaneLeasesFor(ctx context.Context, lanes []int, owners []string, token uuid.UUID, d time.Duration) ([]int, error) {
	if token == uuid.Nil {
		return nil, fmt.Errorf("%w: a lease needs a token", store.ErrInvalidArgument)
	}
	if d < time.Millisecond {
		return nil, fmt.Errorf("%w: lease duration %s is under 1ms", store.ErrInvalidArgument, d)
	}
	if len(owners) != len(lanes) {
		return nil, fmt.Errorf("%w: %d owners for %d lanes", store.ErrInvalidArgument, len(owners), len(lanes))
	}
	if len(lanes) == 0 {
		return nil, nil
	}
	var names storesql.ArrayLiteral
	for _, o := range owners {
		names.Text(storesql.CleanText(o), false)
	}
	rows, err := s.db.QueryContext(ctx, s.q.laneLeases, storesql.IntArray(lanes), names.String(), token.String(), d.Microseconds())
	if err != nil {
		return nil, storesql.Wrap(ctx, "acquire lane leases", err)
	}
	defer rows.Close()
	held := make([]int, 0, len(lanes))
	for rows.Next() {
		var lane int
		if err := rows.Scan(&lane); err != nil {
			return nil, storesql.Wrap(ctx, "acquire lane leases", err)
		}
		held = append(held, lane)
	}
	if err := rows.Err(); err != nil {
		return nil, storesql.Wrap(ctx, "acquire lane leases", err)
	}
	slices.Sort(held)
	return held, storesql.Wrap(ctx, "acquire lane leases", rows.Close())
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
	return storesql.QueryRows(ctx, s.db, "lock lane leases", s.q.laneLocks, s.laneLockArgs(lanes, token, min), func(rows *sql.Rows, l *int) error {
		return rows.Scan(l)
	})
}

// validLaneLock checks the arguments of a lock of lane leases.
func validLaneLock(token uuid.UUID, min time.Duration) error {
	if token == uuid.Nil {
		return fmt.Errorf("%w: a lease needs a token", store.ErrInvalidArgument)
	}
	if min < 0 {
		return fmt.Errorf("%w: negative time left %s", store.ErrInvalidArgument, min)
	}
	return nil
}

// laneLockArgs are the parameters of laneLocks.
func (s *Store) laneLockArgs(lanes []int, token uuid.UUID, min time.Duration) []any {
	return []any{storesql.IntArray(lanes), token.String(), min.Microseconds()}
}

// DeleteLaneRows deletes rows by id that the caller read from lanes whose
// leases it holds with token in the same transaction, and returns how many
// it deleted. [Store.LockLaneLeases] keeps the lease rows locked until
// the transaction ends, so no other worker sends or changes the rows
// meanwhile and they need no claim: the ordered worker settles its batches
// this way, writing each delivered row once (its delete) instead of twice.
// A row whose lane's lease token does not hold is left alone.
func (s *Store) DeleteLaneRows(ctx context.Context, ids []uuid.UUID, token uuid.UUID) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	return s.affected(ctx, "delete lane rows", s.q.laneDelete, storesql.UUIDArray(ids), token.String())
}

// FailLaneRows is [Store.FailBatch] for rows read under their lanes' leases,
// held with token in the same transaction, as for [Store.DeleteLaneRows]: it
// records each failure (attempts, last error, retry time) and returns how
// many rows it changed.
func (s *Store) FailLaneRows(ctx context.Context, failures []store.Failure, token uuid.UUID) (int64, error) {
	if len(failures) == 0 {
		return 0, nil
	}
	ids, texts, retryAt := failureArrays(failures)
	return s.affected(ctx, "fail lane rows", s.q.laneFail, storesql.UUIDArray(ids), texts, retryAt, token.String())
}

// ParkLaneRows is [Store.Park] for rows read under their lanes' leases,
// held with token in the same transaction, as for [Store.DeleteLaneRows]:
// each row is parked with its key, and it returns how many rows it changed.
func (s *Store) ParkLaneRows(ctx context.Context, failures []store.Failure, token uuid.UUID) (int64, error) {
	if len(failures) == 0 {
		return 0, nil
	}
	ids, texts, _ := failureArrays(failures)
	return s.affected(ctx, "park lane rows", s.q.lanePark, storesql.UUIDArray(ids), texts, token.String())
}

// DeferLaneRows makes scheduled ordered rows, read under their lanes'
// leases held with token in the same transaction (as for
// [Store.DeleteLaneRows]), hold their keys until their delivery time, as a
// row waiting for its retry holds its key: each row's retry time is set to
// its store.Failure's RetryAt (its delivery time), its attempts and last error
// are left as they were. The lane's other keys go on meanwhile. It returns
// how many rows it changed; a zero RetryAt is refused, since it would hold
// nothing.
func (s *Store) DeferLaneRows(ctx context.Context, rows []store.Failure, token uuid.UUID) (int64, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	for _, f := range rows {
		if f.RetryAt.IsZero() {
			return 0, fmt.Errorf("%w: deferring row %s needs a time", store.ErrInvalidArgument, f.ID)
		}
	}
	ids, _, until := failureArrays(rows)
	return s.affected(ctx, "defer lane rows", s.q.laneDefer, storesql.UUIDArray(ids), until, token.String())
}

// ReleaseLeases deletes every lease held by token: a worker's membership and
// lanes, on graceful stop.
func (s *Store) ReleaseLeases(ctx context.Context, token uuid.UUID) error {
	_, err := s.db.ExecContext(ctx, s.q.releaseOwner, token)
	return storesql.Wrap(ctx, "release leases", err)
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
		return nil, storesql.Wrap(ctx, "prune members", err)
	}
	return s.Store.Members(ctx)
}

// RowsBeyondLanes counts, up to 10,000, the pending rows whose lane is lanes
// or more, or negative: rows that a worker configured with lanes lanes never
// scans, because their writer hashed keys into more lanes or another program
// wrote them.
func (s *Store) RowsBeyondLanes(ctx context.Context, lanes int) (int64, error) {
	return storesql.Count(ctx, s.db, "rows beyond lanes", s.q.beyondLanes, lanes)
}

// ServerTime returns the database server's current time (clock_timestamp()).
// Workers compare it with their own clock to judge eligibility on the
// database's clock, the one every writer and worker shares.
func (s *Store) ServerTime(ctx context.Context) (time.Time, error) {
	rows, err := s.db.QueryContext(ctx, s.q.serverTime)
	if err != nil {
		return time.Time{}, storesql.Wrap(ctx, "server time", err)
	}
	defer rows.Close()
	var t time.Time
	if !rows.Next() {
		return time.Time{}, storesql.Wrap(ctx, "server time", errors.Join(rows.Err(), sql.ErrNoRows))
	}
	if err := rows.Scan(&t); err != nil {
		return time.Time{}, storesql.Wrap(ctx, "server time", err)
	}
	return t, storesql.Wrap(ctx, "server time", rows.Close())
}

// failureArrays returns the failures' ids, and their errors and retry times
// as array literals.
func failureArrays(f []store.Failure) (ids []uuid.UUID, texts, retryAt string) {
	return storesql.FailureArrays(len(f), func(i int) (uuid.UUID, string, time.Time) { return f[i].ID, f[i].Error, f[i].RetryAt })
}
