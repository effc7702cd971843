package store

import (
	"context"
	"database/sql"
	"time"

	"github.com/relayer-go/relayer/internal/storesql"
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
const PauseStaleAfter = storesql.PauseStaleAfter

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
	list string
}

func buildPauseQueries(n names) *pauseQueries {
	return &pauseQueries{
		list: `SELECT transport, destination, owner, since, next_probe, coalesce(last_error, '') FROM ` + n.Pauses + `
WHERE updated_at > now() - $1 * interval '1 microsecond' ORDER BY transport, destination, owner`,
	}
}

// Pauses returns the pauses published and refreshed within PauseStaleAfter,
// by transport, destination and owner.
func (s *Store) Pauses(ctx context.Context) ([]Pause, error) {
	return storesql.QueryRows(ctx, s.db, "pauses", s.pq.list, []any{PauseStaleAfter.Microseconds()}, func(rows *sql.Rows, p *Pause) error {
		err := rows.Scan(&p.Transport, &p.Destination, &p.Owner, &p.Since, &p.NextProbe, &p.LastError)
		p.Since, p.NextProbe = p.Since.UTC(), p.NextProbe.UTC()
		return err
	})
}
