package store

import (
	"context"
	"strings"
	"time"

	"github.com/google/uuid"
)

// DeliveredCount is what one dispatching process (one dispatch.Runner)
// records of its deliveries: the rows it delivered (sent, and deleted from
// the outbox) since it started, as of UpdatedAt.
type DeliveredCount struct {
	// Token identifies the runner; a runner started again records under a
	// new one, from zero.
	Token uuid.UUID
	// Owner names the runner's process, as its workers' leases do.
	Owner string
	// Delivered counts the rows the runner delivered since StartedAt.
	Delivered int64
	// StartedAt is when the runner first recorded; UpdatedAt when it last
	// did.
	StartedAt, UpdatedAt time.Time
}

// DeliveredCounts returns what every runner of the outbox recorded of its
// deliveries (migration 8), in no particular order. The rate of delivery
// over a period is the growth of each Token's count over it, summed; a
// Token that appears meanwhile counts from zero. recorded is false when
// the outbox's tables predate migration 8: there is then no such record.
//
// Runners record about once a second while they deliver, so the counts
// trail the deliveries by up to a second; they count only rows whose send
// succeeded and whose deletion committed, never rows moved to the dead
// letters or taken by a transaction that rolled back.
func (s *Store) DeliveredCounts(ctx context.Context) (counts []DeliveredCount, recorded bool, err error) {
	const op = "delivered counts"
	var exists bool
	if err := s.queryRow(ctx, op, s.aq.exists, []any{&exists}); err != nil || !exists {
		return nil, false, err
	}
	rows, err := s.db.QueryContext(ctx, s.aq.read)
	if err != nil {
		return nil, false, wrap(ctx, op, err)
	}
	defer rows.Close()
	for rows.Next() {
		var c DeliveredCount
		if err := rows.Scan(&c.Token, &c.Owner, &c.Delivered, &c.StartedAt, &c.UpdatedAt); err != nil {
			return nil, false, wrap(ctx, op, err)
		}
		c.StartedAt, c.UpdatedAt = c.StartedAt.UTC(), c.UpdatedAt.UTC()
		counts = append(counts, c)
	}
	return counts, true, wrap(ctx, op, rows.Err())
}

// activityQueries are the statements of the delivery record.
type activityQueries struct{ exists, read string }

func buildActivityQueries(n names) *activityQueries {
	return &activityQueries{
		exists: `SELECT to_regclass('` + strings.ReplaceAll(n.Activity, `'`, `''`) + `') IS NOT NULL`,
		read:   `SELECT owner_token, owner, delivered, started_at, updated_at FROM ` + n.Activity,
	}
}
