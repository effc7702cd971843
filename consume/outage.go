package consume

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/internal/tables"
	"github.com/relayer-go/relayer/store"
)

// ErrNotReady is wrapped by [Consumer.Check]'s errors for a database the
// consumer cannot work on until someone acts: its inbox table does not
// exist (the outbox tables were never migrated where the consumer's
// Options.Tables say), or the consumer's role may not write it. The error
// names the table and what to run.
var ErrNotReady = errors.New("consume: the database is not ready for this consumer")

// The database's faults that are never a message's: PostgreSQL's SQLSTATE
// classes and codes of a server that is unreachable, stopping, out of
// resources or read-only, of tables or privileges that are not there, and
// of transactions that lost to a concurrent one.
var (
	faultClasses = []string{
		"08", // connection exception
		"53", // insufficient resources (too many connections, disk full)
		"57", // operator intervention: shutdown, cannot connect now (57014, a cancelled statement, is excluded below)
		"58", // system error (I/O)
		"28", // invalid authorization
	}
	faultCodes = map[string]bool{
		"3D000": true, // the database does not exist
		"3F000": true, // the schema does not exist
		"42P01": true, // the table does not exist
		"42501": true, // insufficient privilege
		"25006": true, // read-only transaction (a standby, or default_transaction_read_only)
		"40001": true, // serialization failure
		"40P01": true, // deadlock detected
	}
)

// faultKind is what an error says of the database.
type faultKind int

const (
	notFault   faultKind = iota // the message's (or its handler's) error
	fault                       // the database's, whoever met it
	maybeFault                  // a lost connection without a SQLSTATE, met by the handler: the database, or another server the handler calls
)

// classify tells whether err, returned by the consumer's transaction, is
// a fault of the database rather than of the message. A statement of the
// consumer's own (begin, the inbox record, commit) that fails without a
// server's answer lost its connection; the same error from a handler may
// come from any server the handler calls, so it is a fault only if the
// database then fails a probe (maybeFault).
func classify(err error, fromHandler bool) faultKind {
	if err == nil || errors.Is(err, relayer.ErrPermanent) {
		return notFault
	}
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) {
		code := pg.SQLState()
		if faultCodes[code] {
			return fault
		}
		if code == "57014" {
			return notFault // query_canceled: a statement timeout, the handler's
		}
		for _, class := range faultClasses {
			if strings.HasPrefix(code, class) {
				return fault
			}
		}
		return notFault
	}
	if !lostConnection(err) {
		return notFault
	}
	if fromHandler {
		return maybeFault
	}
	return fault
}

// lostConnection reports an error of a connection that could not be made
// or broke, as database/sql, pgx and lib/pq report them.
func lostConnection(err error) bool {
	var connect *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrConnDone),
		errors.As(err, &connect), pgconn.SafeToRetry(err), errors.As(err, &netErr),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	// pgx reports a use of a connection it closed after a fault with this
	// error, which it does not export.
	return strings.Contains(err.Error(), "conn closed")
}

// ownStatement marks an error of a statement the consumer runs itself
// (begin, the inbox record, commit), as opposed to the handler's.
type ownStatement struct{ err error }

func (e *ownStatement) Error() string { return e.err.Error() }
func (e *ownStatement) Unwrap() error { return e.err }

// outageBackoff is how long the consumer waits before probing a database
// that failed, doubling after each failed probe up to outageMaxBackoff; a
// database that answers again is seen within outageMaxBackoff.
const (
	outageBackoff    = 250 * time.Millisecond
	outageMaxBackoff = 5 * time.Second
	// outageReminder is how often an outage that goes on is logged again.
	outageReminder = time.Minute
	// probeTimeout bounds one probe of the database.
	probeTimeout = 5 * time.Second
)

// outage holds the deliveries of a consumer whose database failed them,
// and probes the database until it answers: one prober for all of them,
// one log line when the outage begins, a reminder a minute while it lasts,
// and one when a transaction commits again.
type outage struct {
	logger *slog.Logger
	name   string
	probe  func(ctx context.Context) error

	// active is set while an outage is announced or its backoff not yet
	// reset, so that a commit outside an outage takes no lock.
	active atomic.Bool

	mu        sync.Mutex
	probing   bool          // a prober runs
	reopened  chan struct{} // closed by the prober when the database answered
	announced bool          // the outage was logged, and no transaction has committed since
	since     time.Time     // when the announced outage began
	delay     time.Duration // the next probe's wait; back to outageBackoff once a transaction commits
	waiting   int           // deliveries waiting for the prober
	idle      chan struct{} // told when no delivery waits any more
	held      uint64        // deliveries held since the outage began
	lastCause string
}

// wait holds a delivery whose transaction met cause, a fault of the
// database, until a probe of the database succeeds or ctx ends.
func (o *outage) wait(ctx context.Context, cause error) error {
	o.mu.Lock()
	o.active.Store(true)
	o.held++
	o.lastCause = cause.Error()
	if !o.announced {
		o.announced, o.since = true, time.Now()
		o.logger.Warn("consume: the database failed, not the message; handling is paused until it answers, and no attempt is spent",
			slog.String("consumer", o.name), slog.String("error", cause.Error()))
	}
	if !o.probing {
		o.probing = true
		o.reopened = make(chan struct{})
		if o.idle == nil {
			o.idle = make(chan struct{}, 1)
		}
		select {
		case <-o.idle: // left by the end of an earlier outage
		default:
		}
		if o.delay == 0 {
			o.delay = outageBackoff
		}
		go o.run()
	}
	o.waiting++
	reopened := o.reopened
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		o.waiting--
		if o.waiting == 0 && o.idle != nil {
			select {
			case o.idle <- struct{}{}: // the prober stops: nobody waits
			default:
			}
		}
		o.mu.Unlock()
	}()
	select {
	case <-reopened:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run probes the database, after a backoff that grows with each failure,
// until it answers or no delivery waits any more.
func (o *outage) run() {
	reminded := time.Now()
	for {
		o.mu.Lock()
		delay := max(o.delay, outageBackoff)
		o.delay = min(2*delay, outageMaxBackoff)
		idle := o.idle
		o.mu.Unlock()
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-idle:
			// Every delivery stopped waiting (their consumer stopped):
			// probe no more.
			t.Stop()
		}
		var err error
		o.mu.Lock()
		waiting := o.waiting
		o.mu.Unlock()
		if waiting > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
			err = o.probe(ctx)
			cancel()
		}
		o.mu.Lock()
		if err == nil || o.waiting == 0 {
			o.probing = false
			close(o.reopened)
			o.mu.Unlock()
			return
		}
		if time.Since(reminded) >= outageReminder {
			reminded = time.Now()
			o.logger.Warn("consume: the database still fails; handling stays paused",
				slog.String("consumer", o.name), slog.Duration("for", time.Since(o.since).Round(time.Second)),
				slog.Int("waiting", o.waiting), slog.Uint64("held", o.held), slog.String("error", err.Error()))
		}
		o.mu.Unlock()
	}
}

// committed records that a transaction committed: an announced outage is
// over, and says so once.
func (o *outage) committed() {
	if !o.active.Load() {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.waiting > 0 {
		return // deliveries still wait: the outage goes on for them
	}
	if o.announced {
		o.logger.Info("consume: the database answers again; handling resumed",
			slog.String("consumer", o.name), slog.Duration("after", time.Since(o.since).Round(time.Millisecond)),
			slog.Uint64("held", o.held))
	}
	o.announced, o.held = false, 0
	if !o.probing {
		o.delay = 0
		o.active.Store(false)
	}
}

// The markers of the readiness check's exceptions.
const (
	markNoInbox  = "relayer: no inbox table"
	markNoRights = "relayer: the inbox is not writable"
	markReadOnly = "relayer: transactions are read-only"
)

// readinessStatement is the one-statement check of a consumer's database,
// run through ExecContext alone (as every data layer's transaction can):
// the inbox table exists, the consumer's role may read and insert into
// it, and its transactions are not read-only; each failure raises an
// exception with its marker and SQLSTATE. inbox is the quoted, qualified
// table name, made of validated identifiers.
func readinessStatement(inbox string) string {
	lit := "'" + strings.ReplaceAll(inbox, "'", "''") + "'"
	return "DO $relayer$\nBEGIN\n" +
		"    IF to_regclass(" + lit + ") IS NULL THEN\n" +
		"        RAISE EXCEPTION '" + markNoInbox + "' USING ERRCODE = '42P01';\n" +
		"    END IF;\n" +
		"    IF NOT (has_table_privilege(" + lit + ", 'SELECT') AND has_table_privilege(" + lit + ", 'INSERT')) THEN\n" +
		"        RAISE EXCEPTION '" + markNoRights + "' USING ERRCODE = '42501';\n" +
		"    END IF;\n" +
		"    IF current_setting('transaction_read_only') = 'on' THEN\n" +
		"        RAISE EXCEPTION '" + markReadOnly + "' USING ERRCODE = '25006';\n" +
		"    END IF;\n" +
		"END\n$relayer$"
}

// checkOn runs the readiness check through q. It returns an error wrapping
// [ErrNotReady] for a missing table or privilege, and otherwise the
// database's error (a read-only database's carries SQLSTATE 25006).
func (c *Consumer) checkOn(ctx context.Context, q store.DBTX) error {
	opts := c.inbox.Options()
	inboxTable := tables.Of(opts.Schema, opts.TablePrefix).Inbox
	_, err := q.ExecContext(ctx, readinessStatement(inboxTable))
	switch {
	case err == nil:
		return nil
	case strings.Contains(err.Error(), markNoInbox):
		return fmt.Errorf("%w: the inbox table %s does not exist (Options.Tables: %s): run `%s` or store.Migrate",
			ErrNotReady, inboxTable, opts.Label(), migrateCommand(opts))
	case strings.Contains(err.Error(), markNoRights):
		return fmt.Errorf("%w: the consumer's role may not read and insert into the inbox table %s: grant it SELECT and INSERT",
			ErrNotReady, inboxTable)
	}
	return fmt.Errorf("consume: checking the database: %w", err)
}

// migrateCommand is the command that migrates opts' tables.
func migrateCommand(opts store.Tables) string {
	cmd := "relayer migrate --database-url URL"
	if opts.Schema != "public" {
		cmd += " --schema " + opts.Schema
	}
	if opts.TablePrefix != "" {
		cmd += " --prefix " + opts.TablePrefix
	}
	return cmd
}
