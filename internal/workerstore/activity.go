package workerstore

import (
	"context"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/internal/tables"
)

// activityQueries write a runner's record of its deliveries (migration 8,
// read by store.Store.DeliveredCounts).
type activityQueries struct{ record, prune string }

// activityStale is how long a runner's record outlives its last update:
// the record of a runner that stopped or died, which no console needs any
// more, is deleted by the next runner to record after it.
const activityStale = "1 day"

func buildActivityQueries(n tables.Names) *activityQueries {
	return &activityQueries{
		record: `INSERT INTO ` + n.Activity + ` AS a (owner_token, owner, delivered) VALUES ($1, $2, $3)
ON CONFLICT (owner_token) DO UPDATE SET delivered = GREATEST(a.delivered, excluded.delivered), updated_at = now()`,
		prune: `DELETE FROM ` + n.Activity + ` WHERE updated_at < now() - interval '` + activityStale + `'`,
	}
}

// RecordDelivered records that the runner token (of the process owner)
// has delivered delivered rows since it started. A runner calls it with
// counts that only grow; a record that arrives late never lowers the count.
func (s *Store) RecordDelivered(ctx context.Context, token uuid.UUID, owner string, delivered int64) error {
	_, err := s.affected(ctx, "record deliveries", s.aq.record, token, owner, delivered)
	return err
}

// PruneDelivered deletes the records of runners that have not recorded
// for a day.
func (s *Store) PruneDelivered(ctx context.Context) error {
	_, err := s.affected(ctx, "prune delivery records", s.aq.prune)
	return err
}
