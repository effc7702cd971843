package workerstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/relayer-go/relayer/internal/storesql"
	"github.com/relayer-go/relayer/store"
)

// Pipelined statements. An ordered batch runs four statements: it locks its
// lanes' leases, reads their heads, deletes what it sent and commits. Each
// is a round trip, and on a busy outbox a round trip (the client's write and
// read, the server process woken and put back to sleep) costs both sides
// more CPU than the small statements themselves. Where the store runs on a
// pinned connection of pgx's database/sql driver (the workers' sessions), it
// sends the lock with the read, and the delete with the commit, in one round
// trip each (pgx's batches); each statement still runs on its own and in the
// same order, so that the read's snapshot is taken after the lock is held, as
// if the client had waited. On any other driver the statements run one by
// one, with the same results.

// ErrLaneRowsGone is returned by [Store.CommitLaneDeletes] when it could not
// delete every row it was given: a row is gone, or its lane's lease is no
// longer held with the token. It commits nothing then.
var ErrLaneRowsGone = errors.New("store: lane rows gone or their lease lost")

// laneRowsGoneMark starts the text whose cast to an integer fails the
// checked delete (laneDeleteAll) when it deleted fewer rows than it was
// given: plain SQL has no RAISE, and the error must reach the server before
// the COMMIT pipelined after it, which it then skips.
const laneRowsGoneMark = "relayer: lane rows gone: deleted "

// pipelined runs f on the pgx connection under the store's database handle
// when that handle is a connection (*sql.Conn) of pgx's database/sql driver,
// and reports whether it did; it does not run f on any other handle.
func (s *Store) pipelined(f func(*pgx.Conn) error) (ran bool, err error) {
	conn, ok := s.db.(*sql.Conn)
	if !ok {
		return false, nil
	}
	err = conn.Raw(func(driverConn any) error {
		pc, ok := driverConn.(interface{ Conn() *pgx.Conn })
		if !ok {
			return nil
		}
		ran = true
		return f(pc.Conn())
	})
	return ran, err
}

// LockAndReadLanes is [Store.LockLaneLeases] followed by [Store.ReadLanes]
// in the same transaction: it locks those of lanes that token holds for at
// least min more and returns them, then reads the lanes of from. On a pinned
// pgx connection both statements go in one round trip; the read still runs
// after the lock and sees what the lanes' previous holders committed. The
// read covers every lane of from, held or not: a caller that holds fewer
// lanes than it asked for must not act on the rows of the others.
func (s *Store) LockAndReadLanes(ctx context.Context, lanes []int, token uuid.UUID, min time.Duration, dst []store.Row, from []LaneCursor, limit int) (held []int, rows []store.Row, reads []LaneRead, err error) {
	if err := validLaneLock(token, min); err != nil {
		return nil, dst[:0], nil, err
	}
	toRead, err := validLaneRead(from, limit)
	if err != nil {
		return nil, dst[:0], nil, err
	}
	if !toRead || len(lanes) == 0 {
		held, err := s.LockLaneLeases(ctx, lanes, token, min)
		return held, dst[:0], nil, err
	}
	ran, err := s.pipelined(func(c *pgx.Conn) error {
		args := append(cursorArgs(from), limit)
		b := &pgx.Batch{}
		b.Queue(s.q.laneLocks, s.laneLockArgs(lanes, token, min)...)
		b.Queue(s.laneHeadsFor(from), args...)
		res := c.SendBatch(ctx, b)
		defer res.Close()
		locked, err := res.Query()
		if err != nil {
			return storesql.Wrap(ctx, "lock lane leases", err)
		}
		held, err = scanLanes(locked)
		locked.Close()
		if err != nil {
			return storesql.Wrap(ctx, "lock lane leases", err)
		}
		read, err := res.Query()
		if err != nil {
			return storesql.Wrap(ctx, "read lanes", err)
		}
		rows, reads, err = s.scanLaneReads(read, true, dst, limit)
		read.Close()
		unordered := errors.Is(err, errLaneReadUnordered)
		if err != nil && !unordered {
			return storesql.Wrap(ctx, "read lanes", err)
		}
		if err := res.Close(); err != nil || !unordered {
			return storesql.Wrap(ctx, "read lanes", err)
		}
		// Still under the locks: read again, sorted.
		sorted, err := c.Query(ctx, s.q.laneHeadsSorted, args...)
		if err != nil {
			return storesql.Wrap(ctx, "read lanes", err)
		}
		defer sorted.Close()
		if rows, reads, err = s.scanLaneReads(sorted, true, dst, limit); err != nil {
			return storesql.Wrap(ctx, "read lanes", err)
		}
		sorted.Close()
		return storesql.Wrap(ctx, "read lanes", sorted.Err())
	})
	if ran || err != nil {
		if err != nil {
			return nil, dst[:0], nil, err
		}
		return held, rows, reads, nil
	}
	if held, err = s.LockLaneLeases(ctx, lanes, token, min); err != nil {
		return nil, dst[:0], nil, err
	}
	rows, reads, err = s.ReadLanes(ctx, dst, from, limit)
	return held, rows, reads, err
}

// CommitLaneDeletes deletes rows by id as [Store.DeleteLaneRows] does and
// commits the open transaction (with COMMIT AND CHAIN when chain is set, so
// that a new one is open afterwards), on a pinned pgx connection in one round
// trip. Unless it deleted every one of ids it commits nothing: it returns an
// error wrapping [ErrLaneRowsGone] and leaves the transaction failed, for the
// caller to roll back. ids must not be empty, and the store must run on a
// connection (*sql.Conn) whose transaction the caller began with BEGIN: on a
// *sql.Tx the COMMIT would end a transaction database/sql still thinks open,
// and on a *sql.DB it could run on another connection.
func (s *Store) CommitLaneDeletes(ctx context.Context, ids []uuid.UUID, token uuid.UUID, chain bool) error {
	if len(ids) == 0 {
		return fmt.Errorf("%w: no rows to delete", store.ErrInvalidArgument)
	}
	if _, ok := s.db.(*sql.Conn); !ok {
		return fmt.Errorf("%w: CommitLaneDeletes needs a store bound to a *sql.Conn, got %T", store.ErrInvalidArgument, s.db)
	}
	commit := "COMMIT"
	if chain {
		commit += " AND CHAIN"
	}
	args := []any{storesql.UUIDArray(ids), token.String(), len(ids)}
	ran, err := s.pipelined(func(c *pgx.Conn) error {
		b := &pgx.Batch{}
		b.Queue(s.q.laneDeleteAll, args...)
		b.Queue(commit)
		return c.SendBatch(ctx, b).Close()
	})
	if !ran && err == nil {
		if _, err = s.db.ExecContext(ctx, s.q.laneDeleteAll, args...); err == nil {
			_, err = s.db.ExecContext(ctx, commit)
		}
	}
	if err != nil && strings.Contains(err.Error(), laneRowsGoneMark) {
		err = fmt.Errorf("%w (%w)", ErrLaneRowsGone, err)
	}
	return storesql.Wrap(ctx, "delete lane rows and commit", err)
}

// scanLanes reads a result of lane numbers.
func scanLanes(rows laneRows) ([]int, error) {
	var lanes []int
	for rows.Next() {
		var l int
		if err := rows.Scan(&l); err != nil {
			return nil, err
		}
		lanes = append(lanes, l)
	}
	return lanes, rows.Err()
}
