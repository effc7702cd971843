package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Operator reads: what the command line and consoles show. None of them is on
// a hot path.

// LeaseRow is one live lease: a worker's membership ("member:<instance>"), a
// lane ("lane:<n>"), or a singleton worker's ("recovery", "cleanup").
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

// StuckRow is a message out of delivery: a dead letter, or a parked row.
type StuckRow struct {
	ID          uuid.UUID
	Type        string
	Destination string
	// Key is the ordering key, or "".
	Key       string
	Attempts  int
	LastError string
	// Reason says why a dead letter was taken out of delivery; "" for a
	// parked row.
	Reason string
	// Since is when the row died or was parked.
	Since time.Time
}

// ListDead returns up to limit dead letters, newest first.
func (s *Store) ListDead(ctx context.Context, limit int) ([]StuckRow, error) {
	return s.listStuck(ctx, "list dead letters", s.q.listDead, limit)
}

// ListParked returns up to limit parked rows, in lane and key order.
func (s *Store) ListParked(ctx context.Context, limit int) ([]StuckRow, error) {
	return s.listStuck(ctx, "list parked rows", s.q.listParked, limit)
}

func (s *Store) listStuck(ctx context.Context, op, query string, limit int) ([]StuckRow, error) {
	if limit < 1 {
		return nil, fmt.Errorf("%w: limit must be positive, got %d", ErrInvalidArgument, limit)
	}
	rows, err := s.db.QueryContext(ctx, query, limit)
	if err != nil {
		return nil, wrap(ctx, op, err)
	}
	defer rows.Close()
	var out []StuckRow
	for rows.Next() {
		var r StuckRow
		var since sql.NullTime
		if err := rows.Scan(&r.ID, &r.Type, &r.Destination, &r.Key, &r.Attempts, &r.LastError, &r.Reason, &since); err != nil {
			return nil, wrap(ctx, op, err)
		}
		r.Since = since.Time.UTC()
		out = append(out, r)
	}
	return out, wrap(ctx, op, rows.Err())
}

// Reset empties the outbox, its dead letters, leases and published pauses (the inbox stays):
// every pending message is lost. It is for demos and test environments that
// start each run from nothing, never for a live outbox.
func (s *Store) Reset(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, s.q.reset)
	return wrap(ctx, "reset", err)
}
