package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/relayer-go/relayer/internal/storesql"
)

// The lane count, recorded with the schema (migration 7). A key's lane is
// its hash modulo the count, so writers and workers that count differently
// send a key's messages through different lanes, out of order. The first
// writer or worker of an outbox to start records the count it was given;
// the others compare theirs with it and refuse to start on a mismatch.
// Changing the count needs an outbox without ordered rows and without live
// ordered workers ([Store.SetLaneCount]): stop the writers and workers,
// let the outbox drain, change it, and start them again with the new count.

// Lane count errors; test with [errors.Is].
var (
	// ErrLaneCountMismatch is returned when a writer or worker is given a
	// lane count other than the one the outbox records. The error names both
	// counts.
	ErrLaneCountMismatch = errors.New("store: lane count differs from the one the outbox records")
	// ErrNotDrained is returned by [Store.SetLaneCount] while the outbox
	// holds ordered rows, parked ones included, or live ordered workers.
	ErrNotDrained = errors.New("store: the outbox is not drained of ordered rows and workers")
)

// laneCountName is the settings row of the lane count.
const laneCountName = "lanes"

// LaneCount returns the lane count the outbox records, and whether it
// records one: it does not before migration 7, nor before the first
// writer or worker started.
func (s *Store) LaneCount(ctx context.Context) (lanes int, recorded bool, err error) {
	var exists bool
	if err := s.queryRow(ctx, "read lane count", s.lq.exists, []any{&exists}); err != nil || !exists {
		return 0, false, err
	}
	var value sql.NullString
	if err := s.queryRow(ctx, "read lane count", s.lq.read, []any{&value}); err != nil {
		return 0, false, err
	}
	if !value.Valid {
		return 0, false, nil
	}
	n, err := strconv.Atoi(value.String)
	if err != nil {
		return 0, false, fmt.Errorf("store: %s records the lane count %q, which is not a number", s.label(), value.String)
	}
	return n, true, nil
}

// CheckLaneCount records lanes as the outbox's lane count when it records
// none, and returns an error wrapping [ErrLaneCountMismatch] when it
// records another. An outbox before migration 7 records nothing and passes.
func (s *Store) CheckLaneCount(ctx context.Context, lanes int) error {
	if err := validLanes(lanes); err != nil {
		return err
	}
	var exists bool
	if err := s.queryRow(ctx, "check lane count", s.lq.exists, []any{&exists}); err != nil || !exists {
		return err
	}
	if _, err := s.db.ExecContext(ctx, s.lq.record, strconv.Itoa(lanes)); err != nil {
		return wrap(ctx, "check lane count", err)
	}
	got, _, err := s.LaneCount(ctx)
	if err != nil {
		return err
	}
	if got != lanes {
		return s.laneMismatch(got, lanes)
	}
	return nil
}

// checkLaneCountWith is [Store.CheckLaneCount] for writers that can only
// execute statements, such as inside a caller's
// transaction: one statement, which records the count in that transaction
// when none is recorded, and fails on a mismatch (aborting the
// transaction).
func (s *Store) checkLaneCountWith(ctx context.Context, exec execFunc, lanes int) error {
	if err := validLanes(lanes); err != nil {
		return err
	}
	err := exec(ctx, strings.ReplaceAll(s.lq.checkWith, "$lanes", strconv.Itoa(lanes)))
	if err == nil {
		return nil
	}
	if msg := err.Error(); strings.Contains(msg, markLanes) {
		var got int
		fmt.Sscanf(msg[strings.Index(msg, markLanes)+len(markLanes):], " %d", &got)
		return s.laneMismatch(got, lanes)
	}
	return wrap(ctx, "check lane count", err)
}

// SetLaneCount records lanes as the outbox's lane count, in place of the
// one it records. It returns an error wrapping [ErrNotDrained], changing
// nothing, while the outbox holds an ordered row (parked ones included:
// redrive or dead-letter them first) or a live ordered worker's
// membership. Writers and workers still running with the old count are not
// seen: stop every one of them first, and start them with the new count.
func (s *Store) SetLaneCount(ctx context.Context, lanes int) (err error) {
	if err := validLanes(lanes); err != nil {
		return err
	}
	if _, _, err := s.LaneCount(ctx); err != nil {
		return err
	}
	var exists bool
	if err := s.queryRow(ctx, "set lane count", s.lq.exists, []any{&exists}); err != nil {
		return err
	}
	if !exists {
		return s.outdated(0, 0)
	}
	db, ok := s.db.(interface {
		BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error)
	})
	if !ok {
		return fmt.Errorf("%w: SetLaneCount needs a *sql.DB or *sql.Conn, not a transaction", ErrInvalidArgument)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return wrap(ctx, "set lane count", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	// The settings row, locked (made first when none is recorded), then
	// the outbox: a writer's check waits for this transaction.
	if _, err = tx.ExecContext(ctx, s.lq.record, strconv.Itoa(lanes)); err != nil {
		return wrap(ctx, "set lane count", err)
	}
	if _, err = tx.ExecContext(ctx, s.lq.lock); err != nil {
		return wrap(ctx, "set lane count", err)
	}
	var rows, members int64
	if err = tx.QueryRowContext(ctx, s.lq.drained).Scan(&rows, &members); err != nil {
		return wrap(ctx, "set lane count", err)
	}
	if rows > 0 || members > 0 {
		return fmt.Errorf("%w: %s holds %d ordered rows and %d live ordered workers; stop the writers and workers, "+
			"let the workers deliver every ordered row (redrive or dead-letter parked ones) and stop, then change the count",
			ErrNotDrained, s.label(), rows, members)
	}
	if _, err = tx.ExecContext(ctx, s.lq.set, strconv.Itoa(lanes)); err != nil {
		return wrap(ctx, "set lane count", err)
	}
	return wrap(ctx, "set lane count", tx.Commit())
}

func validLanes(lanes int) error {
	if lanes < 1 || lanes > 65536 {
		return fmt.Errorf("%w: lane count %d, want 1 to 65536", ErrInvalidArgument, lanes)
	}
	return nil
}

// markLanes is raised by the check statement, followed by the count recorded.
const markLanes = "relayer: lane count mismatch:"

// laneMismatch is the error of a lane count other than the one recorded.
func (s *Store) laneMismatch(recorded, given int) error {
	return fmt.Errorf("%w: %s records %d lanes and this process is configured with %d (relayer.Outbox.Lanes): "+
		"give every writer and worker the recorded count, or change it with `relayer lanes --set` once the outbox is drained",
		ErrLaneCountMismatch, s.label(), recorded, given)
}

// laneCountQueries are the statements of the lane count.
type laneCountQueries struct {
	exists, read, record, lock, set, drained, checkWith string
}

func buildLaneCountQueries(n names) *laneCountQueries {
	regclass := strings.ReplaceAll(n.Settings, `'`, `''`)
	record := `INSERT INTO ` + n.Settings + ` (name, value) VALUES ('` + laneCountName + `', $1) ON CONFLICT (name) DO NOTHING`
	return &laneCountQueries{
		exists: `SELECT to_regclass('` + regclass + `') IS NOT NULL`,
		read:   `SELECT (SELECT value FROM ` + n.Settings + ` WHERE name = '` + laneCountName + `')`,
		record: record,
		lock:   `SELECT value FROM ` + n.Settings + ` WHERE name = '` + laneCountName + `' FOR UPDATE`,
		set:    `UPDATE ` + n.Settings + ` SET value = $1, updated_at = now() WHERE name = '` + laneCountName + `'`,
		drained: `SELECT (SELECT count(*) FROM ` + n.Outbox + ` WHERE lane IS NOT NULL),
    (SELECT count(*) FROM ` + n.Leases + ` WHERE name LIKE '` + storesql.MemberLeasePrefix + `%' AND expires_at > now())`,
		checkWith: `DO $relayer$
DECLARE recorded text;
BEGIN
    IF to_regclass('` + regclass + `') IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO ` + n.Settings + ` (name, value) VALUES ('` + laneCountName + `', '$lanes') ON CONFLICT (name) DO NOTHING;
    SELECT value INTO recorded FROM ` + n.Settings + ` WHERE name = '` + laneCountName + `';
    IF recorded <> '$lanes' THEN
        RAISE EXCEPTION '` + markLanes + ` %', recorded;
    END IF;
END
$relayer$`,
	}
}
