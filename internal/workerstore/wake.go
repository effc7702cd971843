package workerstore

import (
	"context"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/internal/storesql"
)

// Notify wakes the workers that listen to the outbox's wake-up channel
// (store.Tables.WakeChannel), in other processes too. Run it outside
// business transactions: a NOTIFY takes a lock, held until its transaction
// commits, that serializes every notifying commit of the database.
//
// from, unless it is the zero UUID, is the lowest id of the unordered rows
// the notifying commits wrote; it goes as the payload, so that recovery
// takes from just before it (its cursor may be past rows that committed
// after later ids were taken). Workers of releases that read no payload
// ignore it.
func (s *Store) Notify(ctx context.Context, from uuid.UUID) error {
	payload := ""
	if from != uuid.Nil {
		payload = from.String()
	}
	_, err := s.db.ExecContext(ctx, `SELECT pg_notify($1, $2)`, s.Tables().WakeChannel(), payload)
	return storesql.Wrap(ctx, "notify", err)
}
