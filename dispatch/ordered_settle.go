package dispatch

// The end of an ordered batch: its outcome recorded under the lanes' leases
// and committed, then logged and counted.

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

// settle records a batch's outcome under its lanes' leases, each write
// fenced by the worker's lease token and in one statement for all its
// lanes, and commits it: it deletes the sent rows (all of them, or the
// batch rolls back) and records the failed rows' attempts and errors. The
// rest stay as they are. A batch that only deletes sends its delete with
// its commit (see workerstore.Store.CommitLaneDeletes).
func (g *laneGroup) settle(ctx context.Context, st *workerstore.Store, conn *workerConn, parts []laneBatch) error {
	out := sortOutcomes(parts)
	if len(out.buried) > 0 {
		// Written to the dead letters, then deleted with the sent rows in
		// the same transaction: a row is in exactly one of the two tables.
		if err := st.Bury(ctx, out.buried, out.reasons); err != nil {
			return err
		}
	}
	ids := out.sent
	for i := range out.buried {
		ids = append(ids, out.buried[i].ID)
	}
	if len(ids) > 0 && len(out.fails)+len(out.parks)+len(out.defers) == 0 {
		return conn.commitDeletes(ctx, ids, g.token)
	}
	if len(ids) > 0 {
		n, err := st.DeleteLaneRows(ctx, ids, g.token)
		if err != nil {
			return err
		}
		if n != int64(len(ids)) {
			return fmt.Errorf("deleted %d of %d sent or dead-lettered rows; rolling back, they will be sent again", n, len(ids))
		}
	}
	for _, f := range []struct {
		failures []store.Failure
		record   func(context.Context, []store.Failure, uuid.UUID) (int64, error)
	}{{out.fails, st.FailLaneRows}, {out.parks, st.ParkLaneRows}, {out.defers, st.DeferLaneRows}} {
		if len(f.failures) == 0 {
			continue
		}
		n, err := f.record(ctx, f.failures, g.token)
		if err != nil {
			return err
		}
		if n != int64(len(f.failures)) {
			return fmt.Errorf("recorded %d of %d failures; rolling back", n, len(f.failures))
		}
	}
	return conn.endBatch(ctx, "COMMIT")
}

// batchOutcomes are a batch's rows sorted by what settles them.
type batchOutcomes struct {
	sent    []uuid.UUID     // deleted
	fails   []store.Failure // wait for their retry
	parks   []store.Failure // parked with their key
	defers  []store.Failure // scheduled: hold their key until their time
	buried  []store.Row     // over the limits: to the dead letters
	reasons []string        // of buried
}

func sortOutcomes(parts []laneBatch) batchOutcomes {
	var out batchOutcomes
	for _, p := range parts {
		for i := range p.rows {
			if p.outcomes[i] == rowSent {
				out.sent = append(out.sent, p.rows[i].ID)
			}
		}
		for _, f := range p.failures {
			switch {
			case f.row != nil:
				row := *f.row
				row.Attempts++
				row.LastError = f.Error
				out.buried, out.reasons = append(out.buried, row), append(out.reasons, f.reason)
			case f.park:
				out.parks = append(out.parks, f.Failure)
			case f.deferred:
				out.defers = append(out.defers, f.Failure)
			default:
				out.fails = append(out.fails, f.Failure)
			}
		}
	}
	return out
}

// logFailures logs and counts the failures a batch recorded, after its
// commit: a count never runs ahead of what the table shows.
func (g *laneGroup) logFailures(parts []laneBatch) {
	for _, p := range parts {
		w := g.member(p.lane) // the worker whose share the lane is in
		for _, f := range p.failures {
			if f.deferred {
				continue // not a failure
			}
			attrs := []any{slog.String("worker", w.name), slog.Int("lane", p.lane), slog.String("id", f.ID.String()), slog.String("error", f.Error)}
			switch {
			case f.row != nil && f.corrupt:
				w.stats.buried.Add(1)
				g.opts.Logger.Error("dispatch: ordered row without an ordering key cannot be sent in order; moved to the dead letters, the lane's other keys go on", attrs...)
				continue
			case f.row != nil:
				w.stats.buried.Add(1)
				g.opts.Logger.Error("dispatch: ordered row over the outbox's limits failed; moved to the dead letters, its key's later rows go on", attrs...)
				continue
			case f.corrupt:
				w.stats.parked.Add(1)
				g.opts.Logger.Error("dispatch: ordered row with corrupt headers cannot be sent; parked with its key, bytes unchanged, until an operator redrives or skips it; the lane's other keys go on", attrs...)
				continue
			case f.park:
				w.stats.parked.Add(1)
				g.opts.Logger.Warn("dispatch: ordered send failed for good or out of attempts; the row is parked and holds its key until redriven", attrs...)
			default:
				if !f.RetryAt.IsZero() {
					attrs = append(attrs, slog.Time("retry_at", f.RetryAt))
				}
				g.opts.Logger.Warn("dispatch: ordered send failed; its key waits for the retry, the lane's other keys go on", attrs...)
			}
			w.stats.failed.Add(1)
		}
	}
}
