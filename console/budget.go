package console

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/relayer-go/relayer/store"
)

// The database budget of a request: at most [Options.MaxConcurrent]
// requests use the database at once, each in one transaction on one
// connection, and each ends within [Options.QueryTimeout] of its start,
// its wait for a slot included. PostgreSQL ends a statement at the timeout
// itself (statement_timeout, set for the transaction alone), which leaves
// the connection fit for the next request; the request's context ends
// backstopGrace later, for a server that does not answer at all.

// backstopGrace is how long after the query timeout the request's context
// ends, when the server has not ended the statement itself.
const backstopGrace = time.Second

// errNoSlot is returned by withStore when no slot came free before the
// query timeout.
var errNoSlot = errors.New("console: no database slot came free before the query timeout")

// setStatementTimeout sets statement_timeout for the current transaction
// only, from a parameter: SET does not take one.
const setStatementTimeout = `SELECT set_config('statement_timeout', $1, true)`

// withStore runs fn with a store bound to a transaction of its own, within
// the request's database budget. A readOnly transaction is READ ONLY and
// rolled back (a read that failed, such as an activity sample, does not
// fail the page); another is committed when fn succeeds.
func (c *Console) withStore(r *http.Request, readOnly bool, fn func(ctx context.Context, st *store.Store) error) error {
	return c.withTx(r, readOnly, func(ctx context.Context, b *budgetTx) error { return fn(ctx, b.st) })
}

// budgetTx is a request's transaction: its store, and the instant its
// budget ends.
type budgetTx struct {
	tx  *sql.Tx
	st  *store.Store
	end time.Time
}

// withTx is withStore that hands fn the transaction with its budget.
func (c *Console) withTx(r *http.Request, readOnly bool, fn func(ctx context.Context, b *budgetTx) error) error {
	return c.withBudget(r.Context(), readOnly, fn)
}

// withBudget is withTx for work that no request asked for, ending with ctx.
func (c *Console) withBudget(ctx context.Context, readOnly bool, fn func(ctx context.Context, b *budgetTx) error) error {
	start := time.Now()
	end := start.Add(c.opts.QueryTimeout)
	ctx, cancel := context.WithDeadline(ctx, end.Add(backstopGrace))
	defer cancel()
	wait := time.NewTimer(c.opts.QueryTimeout)
	defer wait.Stop()
	select {
	case c.slots <- struct{}{}:
		defer func() { <-c.slots }()
	case <-wait.C:
		return errNoSlot
	case <-ctx.Done():
		return ctx.Err()
	}
	left := time.Until(end)
	if left < time.Millisecond {
		return errNoSlot
	}
	tx, err := c.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: readOnly})
	if err != nil {
		return fmt.Errorf("console: begin: %w", err)
	}
	defer tx.Rollback()
	b := &budgetTx{tx: tx, end: end}
	if err := b.limit(ctx, left); err != nil {
		return err
	}
	if b.st, err = c.store.With(tx); err != nil {
		return err
	}
	if err := fn(ctx, b); err != nil || readOnly {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("console: commit: %w", err)
	}
	return nil
}

// limit sets the statement timeout of the rest of the transaction to d.
func (b *budgetTx) limit(ctx context.Context, d time.Duration) error {
	if _, err := b.tx.ExecContext(ctx, setStatementTimeout, strconv.FormatInt(max(1, d.Milliseconds()), 10)); err != nil {
		return fmt.Errorf("console: statement timeout: %w", err)
	}
	return nil
}

// optional runs fn, a read the page can do without, within share (0 to 1)
// of what is left of the budget, in a savepoint. It reports whether fn
// finished: when fn's statement runs out of its share, the savepoint is
// rolled back, fn's error dropped, and the rest of the budget left to the
// page. Any other error of fn is returned.
func (b *budgetTx) optional(ctx context.Context, share float64, fn func() error) (bool, error) {
	d := time.Duration(float64(time.Until(b.end)) * share)
	if d < 10*time.Millisecond {
		return false, nil
	}
	if _, err := b.tx.ExecContext(ctx, "SAVEPOINT optional_read"); err != nil {
		return false, fmt.Errorf("console: savepoint: %w", err)
	}
	if err := b.limit(ctx, d); err != nil {
		return false, err
	}
	err := fn()
	if err != nil && !timedOut(err) {
		return false, err
	}
	end := "RELEASE SAVEPOINT optional_read"
	if err != nil {
		end = "ROLLBACK TO SAVEPOINT optional_read"
	}
	if _, rerr := b.tx.ExecContext(ctx, end); rerr != nil {
		return false, fmt.Errorf("console: end of savepoint: %w", rerr)
	}
	return err == nil, b.limit(ctx, time.Until(b.end))
}

// sqlStateQueryCanceled is PostgreSQL's query_canceled, which a statement
// ended by statement_timeout reports.
const sqlStateQueryCanceled = "57014"

// timedOut reports whether err is the end of a request's database budget:
// no slot in time, the request's deadline, or the statement timeout.
func timedOut(err error) bool {
	if errors.Is(err, errNoSlot) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var pg interface{ SQLState() string }
	return errors.As(err, &pg) && pg.SQLState() == sqlStateQueryCanceled
}

// dbFailure logs a failed database read or action, with the database's
// error, and returns what the client is told instead, without it (the
// database's text may name tables, columns or values), and its status: 503
// for the end of the budget, 500 otherwise.
func (c *Console) dbFailure(r *http.Request, what string, err error, attrs ...slog.Attr) (string, int) {
	level, msg := slog.LevelError, "console: "+what+" failed"
	switch {
	case timedOut(err):
		level = slog.LevelWarn
	case r.Context().Err() != nil: // the client went away
		level = slog.LevelDebug
	}
	c.opts.Logger.LogAttrs(r.Context(), level, msg, append(attrs, slog.String("path", r.URL.Path),
		slog.String("remote", r.RemoteAddr), slog.String("error", err.Error()))...)
	if timedOut(err) {
		return fmt.Sprintf("the database did not answer within %s, the console's query timeout: the outbox may be locked or the database busy; try again later", c.opts.QueryTimeout),
			http.StatusServiceUnavailable
	}
	if hint := c.migrateHint(r.Context(), err); hint != "" {
		return what + " failed: " + hint, http.StatusInternalServerError
	}
	return what + " failed; the console's log has the database's error", http.StatusInternalServerError
}

// SQLSTATEs of a statement that names a table or column the database does
// not have: the outbox's tables are missing or lack a migration.
const (
	sqlStateUndefinedTable  = "42P01"
	sqlStateUndefinedColumn = "42703"
)

// migrateHint returns, when err is a missing table or column and the
// outbox's schema is indeed missing or outdated, the command that migrates
// it; "" otherwise.
func (c *Console) migrateHint(ctx context.Context, err error) string {
	var pg interface{ SQLState() string }
	if !errors.As(err, &pg) || (pg.SQLState() != sqlStateUndefinedTable && pg.SQLState() != sqlStateUndefinedColumn) {
		return ""
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if _, cerr := c.store.CheckSchema(cctx); !errors.Is(cerr, store.ErrSchemaOutdated) {
		return ""
	}
	o := c.store.Tables()
	cmd := "relayer migrate --database-url URL --schema " + o.Schema
	if o.TablePrefix != "" {
		cmd += " --prefix " + o.TablePrefix
	}
	return fmt.Sprintf("the outbox's tables (schema %s, prefix %q) are missing or lack a migration; run `%s`, or store.Migrate", o.Schema, o.TablePrefix, cmd)
}
