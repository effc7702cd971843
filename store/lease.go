package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
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
		return false, time.Time{}, fmt.Errorf("%w: a lease needs a name and a token", ErrInvalidArgument)
	}
	if d < time.Millisecond {
		return false, time.Time{}, fmt.Errorf("%w: lease duration %s is under 1ms", ErrInvalidArgument, d)
	}
	rows, err := s.db.QueryContext(ctx, s.q.acquireLease, l.Name, cleanText(l.Owner), l.Token, d.Microseconds())
	if err != nil {
		return false, time.Time{}, wrap(ctx, "acquire lease", err)
	}
	defer rows.Close()
	if !rows.Next() {
		return false, time.Time{}, wrap(ctx, "acquire lease", rows.Err())
	}
	if err := rows.Scan(&until); err != nil {
		return false, time.Time{}, wrap(ctx, "acquire lease", err)
	}
	return true, until.UTC(), wrap(ctx, "acquire lease", rows.Close())
}

// ReleaseLease gives the lease up if l.Token holds it.
func (s *Store) ReleaseLease(ctx context.Context, l Lease) error {
	_, err := s.db.ExecContext(ctx, s.q.releaseLease, l.Name, l.Token)
	return wrap(ctx, "release lease", err)
}

// ReleaseBatch gives up token's live claims on ids without recording an
// attempt, so that the rows are eligible again at once. It returns how many
// claims it released.
func (s *Store) ReleaseBatch(ctx context.Context, ids []uuid.UUID, token uuid.UUID, now time.Time) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	return s.affected(ctx, "release batch", s.q.releaseBatch, uuidArray(ids), token, pgTime(now))
}
