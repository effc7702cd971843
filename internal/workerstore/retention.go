package workerstore

import (
	"context"
	"fmt"
	"time"

	"github.com/relayer-go/relayer/internal/storesql"
	"github.com/relayer-go/relayer/internal/tables"
	"github.com/relayer-go/relayer/store"
)

// retentionQueries holds the deletes of the two tables whose rows are kept
// for a retention period: the consumer inbox and the dead letters. Like
// queries, they are built once per store from validated names.
type retentionQueries struct {
	deleteInbox string
	deleteDead  string
}

func buildRetentionQueries(n tables.Names) *retentionQueries {
	// Deletion is bounded: the inner SELECT takes the oldest rows through the
	// timestamp index, stops at the limit, and locks them, skipping rows someone
	// else holds, so a large backlog is removed in short statements that never
	// wait and never lock much. The outer DELETE finds the rows by ctid, a TID
	// scan with no index probe; ctids cannot move under it because the rows stay
	// locked until the statement's transaction ends. ANY(ARRAY(...)) keeps that
	// plan shape in generic plans too, where IN (SELECT ...) may become a join
	// that scans the table.
	deleteOlder := func(table, column string) string {
		return `DELETE FROM ` + table + `
WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM ` + table + `
    WHERE ` + column + ` < $1
    ORDER BY ` + column + ` LIMIT $2
    FOR UPDATE SKIP LOCKED))`
	}
	return &retentionQueries{
		deleteInbox: deleteOlder(n.Inbox, "received_at"),
		deleteDead:  deleteOlder(n.Dead, "dead_at"),
	}
}

// DeleteInboxBefore deletes, in one statement, up to limit inbox records
// received before the instant before, oldest first, and returns how many it
// deleted. Records locked by another transaction are skipped, not waited for.
// A count equal to limit means more may remain; call it again until the count
// is lower. A deleted record no longer deduplicates: a redelivery of its
// message after this runs the handler again.
func (s *Store) DeleteInboxBefore(ctx context.Context, before time.Time, limit int) (int64, error) {
	if err := checkRetentionArgs(before, limit); err != nil {
		return 0, err
	}
	return s.affected(ctx, "delete inbox", s.rq.deleteInbox, storesql.PgTime(before), limit)
}

// DeleteDeadBefore is [Store.DeleteInboxBefore] for dead letters, by the time
// they were moved to the dead-letter table.
func (s *Store) DeleteDeadBefore(ctx context.Context, before time.Time, limit int) (int64, error) {
	if err := checkRetentionArgs(before, limit); err != nil {
		return 0, err
	}
	return s.affected(ctx, "delete dead", s.rq.deleteDead, storesql.PgTime(before), limit)
}

// checkRetentionArgs refuses a zero instant, which pgTime would read as "now"
// and so delete everything.
func checkRetentionArgs(before time.Time, limit int) error {
	if before.IsZero() {
		return fmt.Errorf("%w: the cutoff instant is zero", store.ErrInvalidArgument)
	}
	if limit <= 0 {
		return fmt.Errorf("%w: limit must be positive, got %d", store.ErrInvalidArgument, limit)
	}
	return nil
}
