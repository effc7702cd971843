package store

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// Operator reads: what the command line and consoles show. None of them is on
// a hot path.

// LeaseRow is one live lease: a worker's membership ("member:<instance>"), a
// lane ("lane:<n>"), or a singleton worker's ([RecoveryLeaseName], [CleanupLeaseName]).
type LeaseRow struct {
	Name      string
	Owner     string
	Token     uuid.UUID
	ExpiresAt time.Time
}

// LiveLeases returns the leases that have not expired, by name.
func (s *Store) LiveLeases(ctx context.Context) ([]LeaseRow, error) {
	rows, err := s.db.QueryContext(ctx, s.q.listLeases)
	if err != nil {
		return nil, wrap(ctx, "live leases", err)
	}
	defer rows.Close()
	var out []LeaseRow
	for rows.Next() {
		var l LeaseRow
		if err := rows.Scan(&l.Name, &l.Owner, &l.Token, &l.ExpiresAt); err != nil {
			return nil, wrap(ctx, "live leases", err)
		}
		l.ExpiresAt = l.ExpiresAt.UTC()
		out = append(out, l)
	}
	return out, wrap(ctx, "live leases", rows.Err())
}
