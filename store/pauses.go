package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Paused destinations. A dispatcher pauses a (transport, destination) whose
// broker is down or slow, in its own memory; it publishes its pauses to the
// pauses table so that operators (the relayer command, metrics) see them from
// anywhere. A row belongs to the worker whose token it carries; it is
// refreshed while the pause lasts and deleted when it ends, and rows a
// worker left behind (it crashed) stop counting once PauseStaleAfter has
// passed without a refresh.

// PauseStaleAfter is how long a published pause counts without being
// refreshed; publishers refresh theirs more often than that.
const PauseStaleAfter = time.Minute

// Pause is a destination a worker has paused.
type Pause struct {
	Transport   string
	Destination string
	// Owner names the worker (instance) that paused it.
	Owner string
	// Since is when the pause began; NextProbe when a probe send may next
	// test the destination.
	Since, NextProbe time.Time
	// LastError is the error of the send that paused it last.
	LastError string
}

type pauseQueries struct {
	clear, insert, list, prune string
}

func buildPauseQueries(n names) *pauseQueries {
	return &pauseQueries{
		clear: `DELETE FROM ` + n.Pauses + ` WHERE owner_token = $1`,
		insert: `INSERT INTO ` + n.Pauses + ` (owner_token, owner, transport, destination, since, next_probe, last_error)
SELECT $1, $2, * FROM unnest($3::text::text[], $4::text::text[], $5::text::timestamptz[], $6::text::timestamptz[], $7::text::text[])`,
		list: `SELECT transport, destination, owner, since, next_probe, coalesce(last_error, '') FROM ` + n.Pauses + `
WHERE updated_at > now() - $1 * interval '1 microsecond' ORDER BY transport, destination, owner`,
		prune: `DELETE FROM ` + n.Pauses + ` WHERE updated_at < now() - $1 * interval '1 microsecond'`,
	}
}

// PublishPauses replaces, in one transaction, the pauses published under
// token with pauses, and deletes the rows left by any worker for more than an
// hour. The store must run on a *sql.DB.
func (s *Store) PublishPauses(ctx context.Context, token uuid.UUID, owner string, pauses []Pause) (err error) {
	const op = "publish pauses"
	db, ok := s.db.(*sql.DB)
	if !ok {
		return fmt.Errorf("%w: %s needs a store on a *sql.DB", ErrInvalidArgument, op)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return wrap(ctx, op, err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	if _, err = tx.ExecContext(ctx, s.pq.clear, token); err != nil {
		return wrap(ctx, op, err)
	}
	if len(pauses) > 0 {
		var transports, dests, since, next, errs arrayLiteral
		for _, p := range pauses {
			transports.text(p.Transport, false)
			dests.text(p.Destination, false)
			since.time(p.Since, false)
			next.time(p.NextProbe, false)
			errs.text(cleanText(p.LastError), p.LastError == "")
		}
		if _, err = tx.ExecContext(ctx, s.pq.insert, token, cleanText(owner), transports.String(), dests.String(),
			since.String(), next.String(), errs.String()); err != nil {
			return wrap(ctx, op, err)
		}
	}
	if _, err = tx.ExecContext(ctx, s.pq.prune, time.Hour.Microseconds()); err != nil {
		return wrap(ctx, op, err)
	}
	return wrap(ctx, op, tx.Commit())
}

// ClearPauses deletes the pauses published under token: a worker stopping.
func (s *Store) ClearPauses(ctx context.Context, token uuid.UUID) error {
	_, err := s.db.ExecContext(ctx, s.pq.clear, token)
	return wrap(ctx, "clear pauses", err)
}

// Pauses returns the pauses published and refreshed within PauseStaleAfter,
// by transport, destination and owner.
func (s *Store) Pauses(ctx context.Context) ([]Pause, error) {
	return queryRows(ctx, s.db, "pauses", s.pq.list, []any{PauseStaleAfter.Microseconds()}, func(rows *sql.Rows, p *Pause) error {
		err := rows.Scan(&p.Transport, &p.Destination, &p.Owner, &p.Since, &p.NextProbe, &p.LastError)
		p.Since, p.NextProbe = p.Since.UTC(), p.NextProbe.UTC()
		return err
	})
}
