package store

import (
	"context"
	"database/sql"
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
	return queryRows(ctx, s.db, "live leases", s.q.listLeases, nil, func(rows *sql.Rows, l *LeaseRow) error {
		err := rows.Scan(&l.Name, &l.Owner, &l.Token, &l.ExpiresAt)
		l.ExpiresAt = l.ExpiresAt.UTC()
		return err
	})
}
