package workerstore

import (
	"context"

	"github.com/relayer-go/relayer/internal/storesql"
)

// Notify wakes the workers that listen to the outbox's wake-up channel
// (store.Options.WakeChannel), in other processes too. Run it outside
// business transactions: a NOTIFY takes a lock, held until its transaction
// commits, that serializes every notifying commit of the database.
func (s *Store) Notify(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, s.Options().NotifySQL())
	return storesql.Wrap(ctx, "notify", err)
}
