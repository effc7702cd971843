package workerstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/internal/storesql"
	"github.com/relayer-go/relayer/internal/tables"
	"github.com/relayer-go/relayer/store"
)

// Published pauses (see store.Pause): a worker replaces its rows while its
// pauses last and deletes them when it stops.

type pauseQueries struct {
	clear, insert, prune string
}

func buildPauseQueries(n tables.Names) *pauseQueries {
	return &pauseQueries{
		clear: `DELETE FROM ` + n.Pauses + ` WHERE owner_token = $1`,
		insert: `INSERT INTO ` + n.Pauses + ` (owner_token, owner, transport, destination, since, next_probe, last_error)
SELECT $1, $2, * FROM unnest($3::text::text[], $4::text::text[], $5::text::timestamptz[], $6::text::timestamptz[], $7::text::text[])`,
		prune: `DELETE FROM ` + n.Pauses + ` WHERE updated_at < now() - $1 * interval '1 microsecond'`,
	}
}

// PublishPauses replaces, in one transaction, the pauses published under
// token with pauses, and deletes the rows left by any worker for more than an
// hour. The store must run on a *sql.DB.
func (s *Store) PublishPauses(ctx context.Context, token uuid.UUID, owner string, pauses []store.Pause) (err error) {
	const op = "publish pauses"
	db, ok := s.db.(*sql.DB)
	if !ok {
		return fmt.Errorf("%w: %s needs a store on a *sql.DB", store.ErrInvalidArgument, op)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return storesql.Wrap(ctx, op, err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	if _, err = tx.ExecContext(ctx, s.pq.clear, token); err != nil {
		return storesql.Wrap(ctx, op, err)
	}
	if len(pauses) > 0 {
		var transports, dests, since, next, errs storesql.ArrayLiteral
		for _, p := range pauses {
			transports.Text(p.Transport, false)
			dests.Text(p.Destination, false)
			since.Time(p.Since, false)
			next.Time(p.NextProbe, false)
			errs.Text(storesql.CleanText(p.LastError), p.LastError == "")
		}
		if _, err = tx.ExecContext(ctx, s.pq.insert, token, storesql.CleanText(owner), transports.String(), dests.String(),
			since.String(), next.String(), errs.String()); err != nil {
			return storesql.Wrap(ctx, op, err)
		}
	}
	if _, err = tx.ExecContext(ctx, s.pq.prune, time.Hour.Microseconds()); err != nil {
		return storesql.Wrap(ctx, op, err)
	}
	return storesql.Wrap(ctx, op, tx.Commit())
}

// ClearPauses deletes the pauses published under token: a worker stopping.
func (s *Store) ClearPauses(ctx context.Context, token uuid.UUID) error {
	_, err := s.db.ExecContext(ctx, s.pq.clear, token)
	return storesql.Wrap(ctx, "clear pauses", err)
}
