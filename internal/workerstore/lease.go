package workerstore

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/internal/storesql"
	"github.com/relayer-go/relayer/store"
)

// Lease is a named, time-limited ownership recorded in the leases table, such
// as the right to run recovery for an outbox. Expiry is decided by the
// database's clock.
type Lease struct {
	Name  string
	Owner string    // a description of the holder, for operators
	Token uuid.UUID // proves ownership; random per holder
}

// AcquireLease takes the lease for d when it is free or expired, or renews it
// when l.Token already holds it. It reports whether l holds the lease now and
// until when (database clock).
func (s *Store) AcquireLease(ctx context.Context, l Lease, d time.Duration) (held bool, until time.Time, err error) {
	if l.Name == "" || l.Token == uuid.Nil {
		return false, time.Time{}, fmt.Errorf("%w: a lease needs a name and a token", store.ErrInvalidArgument)
	}
	if d < time.Millisecond {
		return false, time.Time{}, fmt.Errorf("%w: lease duration %s is under 1ms", store.ErrInvalidArgument, d)
	}
	rows, err := s.db.QueryContext(ctx, s.q.acquireLease, l.Name, storesql.CleanText(l.Owner), l.Token, d.Microseconds())
	if err != nil {
		return false, time.Time{}, storesql.Wrap(ctx, "acquire lease", err)
	}
	defer rows.Close()
	if !rows.Next() {
		return false, time.Time{}, storesql.Wrap(ctx, "acquire lease", rows.Err())
	}
	if err := rows.Scan(&until); err != nil {
		return false, time.Time{}, storesql.Wrap(ctx, "acquire lease", err)
	}
	return true, until.UTC(), storesql.Wrap(ctx, "acquire lease", rows.Close())
}

// ReleaseLease gives the lease up if l.Token holds it.
func (s *Store) ReleaseLease(ctx context.Context, l Lease) error {
	_, err := s.db.ExecContext(ctx, s.q.releaseLease, l.Name, l.Token)
	return storesql.Wrap(ctx, "release lease", err)
}
