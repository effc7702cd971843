package store

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"strings"
)

// Migration is one versioned step of the schema. Steps are applied in version
// order and recorded in the <prefix>relayer_migrations table, so that a later
// release adds only the steps a deployment lacks.
type Migration struct {
	Version int
	Name    string
	// SQL is the step's DDL for one outbox, with schema and prefix filled in.
	SQL string
}

// migrationSteps returns every step for the given names. A step is never edited
// once released; changes are new steps.
func migrationSteps(n names) []Migration {
	return []Migration{
		migrationCreateTables(n),
		migrationRetryAndPauses(n),
		migrationFailedIndex(n),
		migrationXactIDs(n),
		migrationFullPages(n),
		migrationNoChecks(n),
		migrationSettings(n),
		migrationDelivered(n),
		migrationHeldKeys(n),
	}
}

// migrationCreateTables is step 1: create outbox, dead-letter, lease and inbox tables.
func migrationCreateTables(n names) Migration {
	return Migration{
		Version: 1,
		Name:    "create outbox, dead-letter, lease and inbox tables",
		SQL: `CREATE TABLE IF NOT EXISTS ` + n.Outbox + ` (
    id            uuid        PRIMARY KEY,
    message_type  text        NOT NULL,
    transport     text        NOT NULL,
    destination   text        NOT NULL,
    body          bytea       NOT NULL,
    headers       bytea       NOT NULL CHECK (octet_length(headers) >= 8),
    ordering_key  text,
    lane          integer     CHECK (lane >= 0 AND lane < 65536),
    created_at    timestamptz NOT NULL DEFAULT now(),
    deliver_at    timestamptz,
    claim_token   uuid,
    claimed_until timestamptz,
    attempts      integer     NOT NULL DEFAULT 0,
    last_error    text,
    parked_at     timestamptz,
    trace_parent  text,
    trace_state   text,
    CHECK (lane IS NULL OR ordering_key IS NOT NULL)
) WITH (fillfactor = 50);
CREATE INDEX IF NOT EXISTS ` + n.Index("outbox_lane_pending_idx") + ` ON ` + n.Outbox + ` (lane, id)
    WHERE lane IS NOT NULL AND parked_at IS NULL;
CREATE INDEX IF NOT EXISTS ` + n.Index("outbox_unordered_pending_idx") + ` ON ` + n.Outbox + ` (id)
    WHERE lane IS NULL AND parked_at IS NULL;
CREATE INDEX IF NOT EXISTS ` + n.Index("outbox_parked_idx") + ` ON ` + n.Outbox + ` (lane, ordering_key)
    WHERE parked_at IS NOT NULL;
ALTER TABLE ` + n.Outbox + ` SET (
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_analyze_scale_factor = 0.0,
    autovacuum_analyze_threshold = 5000
);
CREATE TABLE IF NOT EXISTS ` + n.Dead + ` (
    id            uuid        PRIMARY KEY,
    message_type  text        NOT NULL,
    transport     text        NOT NULL,
    destination   text        NOT NULL,
    body          bytea       NOT NULL,
    headers       bytea       NOT NULL,
    ordering_key  text,
    lane          integer,
    created_at    timestamptz NOT NULL,
    deliver_at    timestamptz,
    attempts      integer     NOT NULL,
    last_error    text,
    trace_parent  text,
    trace_state   text,
    dead_at       timestamptz NOT NULL DEFAULT now(),
    reason        text        NOT NULL
);
CREATE INDEX IF NOT EXISTS ` + n.Index("dead_dead_at_idx") + ` ON ` + n.Dead + ` (dead_at);
CREATE TABLE IF NOT EXISTS ` + n.Leases + ` (
    name        text        PRIMARY KEY,
    owner       text        NOT NULL,
    owner_token uuid        NOT NULL,
    acquired_at timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS ` + n.Inbox + ` (
    consumer    text        NOT NULL,
    message_id  uuid        NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
);
CREATE INDEX IF NOT EXISTS ` + n.Index("inbox_received_idx") + ` ON ` + n.Inbox + ` (received_at);
`,
	}
}

// migrationRetryAndPauses is step 2: retry backoff (retry_at), one index for held ordered keys, paused destinations.
func migrationRetryAndPauses(n names) Migration {
	return Migration{
		Version: 2,
		Name:    "retry backoff (retry_at), one index for held ordered keys, paused destinations",
		// retry_at is when a row that failed may be sent again. A key is held
		// (its rows not sent) while one of its rows is parked or waiting for
		// its retry; the held-key index replaces the parked-key index and
		// holds the ordered rows that ever failed, so that lane reads test
		// a key with one probe of a small index. Workers publish the
		// destinations they have paused, for operators (see pauses.go).
		SQL: `ALTER TABLE ` + n.Outbox + ` ADD COLUMN IF NOT EXISTS retry_at timestamptz;
CREATE INDEX IF NOT EXISTS ` + n.Index("outbox_held_keys_idx") + ` ON ` + n.Outbox + ` (lane, ordering_key)
    WHERE lane IS NOT NULL AND (parked_at IS NOT NULL OR retry_at IS NOT NULL);
DROP INDEX IF EXISTS ` + n.Schema + `.` + n.Index("outbox_parked_idx") + `;
CREATE TABLE IF NOT EXISTS ` + n.Pauses + ` (
    owner_token uuid        NOT NULL,
    transport   text        NOT NULL,
    destination text        NOT NULL,
    owner       text        NOT NULL,
    since       timestamptz NOT NULL,
    next_probe  timestamptz NOT NULL,
    last_error  text,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner_token, transport, destination)
);
`,
	}
}

// migrationFailedIndex is step 3: index of the rows that failed, by destination.
func migrationFailedIndex(n names) Migration {
	return Migration{
		Version: 3,
		Name:    "index of the rows that failed, by destination",
		// The rows that failed (parked, or waiting for a retry) by
		// destination, so that consoles count them exactly on an outbox of
		// any size. Rows that never failed are not in it: writes and claims
		// do not touch it.
		SQL: `CREATE INDEX IF NOT EXISTS ` + n.Index("outbox_failed_idx") + ` ON ` + n.Outbox + ` (transport, destination)
    WHERE parked_at IS NOT NULL OR retry_at IS NOT NULL;
`,
	}
}

// migrationXactIDs is step 4: the transaction that made each row eligible (xact_id), indexed by lane.
func migrationXactIDs(n names) Migration {
	return Migration{
		Version: 4,
		Name:    "the transaction that made each row eligible (xact_id), indexed by lane",
		// xact_id is the id of the transaction that inserted the row, or
		// that last released it from behind a parked key. An ordered
		// worker reads a lane it keeps holding from where its last read
		// ended, plus the rows whose xact_id that read's snapshot did not
		// see, so that its reads do not walk the dead index entries of the
		// rows it already delivered (see lanes.go). The column is added
		// without a default and given one afterwards, which rewrites
		// nothing: rows older than this step keep NULL, which every later
		// snapshot sees. The index holds only ordered rows with an xact_id,
		// so that no statement that does not test it can pick it over the
		// lane index whatever the statistics say, and their ids in binary
		// form (see the lane read in queries.go).
		SQL: `ALTER TABLE ` + n.Outbox + ` ADD COLUMN IF NOT EXISTS xact_id xid8;
ALTER TABLE ` + n.Outbox + ` ALTER COLUMN xact_id SET DEFAULT pg_current_xact_id();
CREATE INDEX IF NOT EXISTS ` + n.Index("outbox_lane_xact_idx") + ` ON ` + n.Outbox + ` (lane, xact_id, uuid_send(id))
    WHERE lane IS NOT NULL AND xact_id IS NOT NULL;
`,
	}
}

// migrationFullPages is step 5: full outbox pages (fillfactor 100).
func migrationFullPages(n names) Migration {
	return Migration{
		Version: 5,
		Name:    "full outbox pages (fillfactor 100)",
		// The first step left half of each page free, so that claims (an
		// UPDATE of columns no index covers) stayed heap-only updates.
		// Workers no longer claim: they take rows with a DELETE, and every
		// UPDATE they run changes a column in an index predicate, which is
		// never heap-only. Half-empty pages only doubled the pages each
		// insert extends the table by and writes. Pages filled before this
		// step keep their free space until their rows are deleted; nothing
		// is rewritten.
		SQL: `ALTER TABLE ` + n.Outbox + ` SET (fillfactor = 100);
`,
	}
}

// migrationNoChecks is step 6: no check constraints on the outbox.
func migrationNoChecks(n names) Migration {
	return Migration{
		Version: 6,
		Name:    "no check constraints on the outbox",
		// The first step checked three things of every row inserted: headers
		// of at least 8 bytes, a lane from 0 to 65535, and a key for every
		// lane. PostgreSQL prepares a table's check expressions anew for
		// every INSERT statement, which cost 5 to 14 µs a statement: up to
		// a tenth of a one-row insert. Relayer's writers validate every row
		// before they write it, and workers refuse what another program
		// could still write wrongly without losing it: headers that do not
		// decode go to the dead letters as corrupt, rows in lanes outside
		// the workers' range are counted and reported (RowsBeyondLanes),
		// and an ordered row without a key goes to the dead letters as
		// corrupt. The constraints are dropped by the names PostgreSQL gave
		// them, after the table (TablePrefixMaxLen keeps those names
		// whole), in one plain statement that any migration tool can run;
		// a check the table's owner added is kept.
		SQL: `ALTER TABLE ` + n.Outbox + ` DROP CONSTRAINT IF EXISTS ` + n.Constraint("outbox_headers_check") + `,
    DROP CONSTRAINT IF EXISTS ` + n.Constraint("outbox_lane_check") + `,
    DROP CONSTRAINT IF EXISTS ` + n.Constraint("outbox_check") + `;
`,
	}
}

// migrationSettings is step 7: settings writers and workers must agree on (the lane count).
func migrationSettings(n names) Migration {
	return Migration{
		Version: 7,
		Name:    "settings writers and workers must agree on (the lane count)",
		// The lane count lived in each process's options, and a writer and a
		// worker configured with different counts reordered keys silently.
		// The first writer or worker to start records its count here, and
		// every later one refuses to start with another (see lanecount.go);
		// `relayer lanes --set` changes it once the outbox is drained.
		SQL: `CREATE TABLE IF NOT EXISTS ` + n.Settings + ` (
    name       text        PRIMARY KEY,
    value      text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
`,
	}
}

// migrationDelivered is step 8: what each dispatching process delivered (for consoles' throughput).
func migrationDelivered(n names) Migration {
	return Migration{
		Version: 8,
		Name:    "what each dispatching process delivered (for consoles' throughput)",
		// Consoles drew the delivery rate from the server's table
		// statistics, which count rows deleted by transactions that rolled
		// back, and moves to the dead letters, as delivered, and which a
		// busy session reports late, in bursts. Each runner now records
		// here, about once a second while it delivers, how many rows it
		// has delivered since it started (see Store.DeliveredCounts); a
		// console sums the growth of these counters. Rows not updated for
		// a day are deleted by the runners.
		SQL: `CREATE TABLE IF NOT EXISTS ` + n.Activity + ` (
    owner_token uuid        PRIMARY KEY,
    owner       text        NOT NULL,
    delivered   bigint      NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
`,
	}
}

// migrationHeldKeys is step 9: consumers' held keys and the messages waiting behind them.
func migrationHeldKeys(n names) Migration {
	return Migration{
		Version: 9,
		Name:    "consumers' held keys and the messages waiting behind them",
		// A consumer that holds keys (package consume) keeps a key whose
		// message failed in the held table, and that message and the key's
		// later ones, in the order they arrived, in the waiting table, in
		// the same transaction as their inbox record; it handles them from
		// there in order once the head succeeds or is dead-lettered. The
		// head of a held key is its first waiting row; attempts are the
		// head's. Writers and workers of the outbox read neither table.
		SQL: `CREATE TABLE IF NOT EXISTS ` + n.InboxHeld + ` (
    consumer     text        NOT NULL,
    ordering_key text        NOT NULL,
    since        timestamptz NOT NULL DEFAULT now(),
    attempts     integer     NOT NULL DEFAULT 0,
    retry_at     timestamptz NOT NULL DEFAULT now(),
    last_error   text,
    skip_message uuid,
    PRIMARY KEY (consumer, ordering_key)
);
CREATE INDEX IF NOT EXISTS ` + n.Index("inbox_held_due_idx") + ` ON ` + n.InboxHeld + ` (consumer, retry_at);
CREATE TABLE IF NOT EXISTS ` + n.InboxWaiting + ` (
    consumer     text        NOT NULL,
    ordering_key text        NOT NULL,
    seq          bigint      GENERATED ALWAYS AS IDENTITY,
    message_id   uuid        NOT NULL,
    message_type text        NOT NULL,
    destination  text        NOT NULL,
    headers      bytea       NOT NULL,
    body         bytea       NOT NULL,
    trace_parent text,
    trace_state  text,
    created_at   timestamptz,
    received_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, ordering_key, seq)
);
`,
	}
}

func migrationsTableSQL(n names) string {
	return `CREATE SCHEMA IF NOT EXISTS ` + n.Schema + `;
CREATE TABLE IF NOT EXISTS ` + n.Migrations + ` (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
`
}

func recordSQL(n names, m Migration) string {
	return fmt.Sprintf("INSERT INTO %s (version, name) VALUES (%d, '%s') ON CONFLICT (version) DO NOTHING;\n",
		n.Migrations, m.Version, strings.ReplaceAll(m.Name, "'", "''"))
}

// Migrations returns the versioned schema steps for opts, for migration tools that
// apply steps one by one. Each step's SQL is idempotent, and records the step
// in the <prefix>relayer_migrations table (creating it first), as [Migrate]
// does: writers and workers check those records when they start
// ([Store.CheckSchema]).
func Migrations(opts Tables) ([]Migration, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	n := newNames(opts.withDefaults())
	steps := migrationSteps(n)
	for i := range steps {
		steps[i].SQL = migrationsTableSQL(n) + steps[i].SQL + recordSQL(n, steps[i])
	}
	return steps, nil
}

// SchemaSQL returns the whole schema for opts as one idempotent script: the
// schema, the migrations table, every step, and the rows recording the steps, so
// that a later [Migrate] applies only newer steps. Use it to feed a migration
// tool; run it in one transaction.
func SchemaSQL(opts Tables) (string, error) {
	if err := opts.Validate(); err != nil {
		return "", err
	}
	n := newNames(opts.withDefaults())
	var b strings.Builder
	b.WriteString(migrationsTableSQL(n))
	for _, m := range migrationSteps(n) {
		fmt.Fprintf(&b, "\n-- %d: %s\n", m.Version, m.Name)
		b.WriteString(m.SQL)
		b.WriteString(recordSQL(n, m))
	}
	return b.String(), nil
}

// Migrate creates or upgrades the tables of one outbox. It applies, in one
// transaction, every step not yet recorded in the database. It is idempotent, and
// safe when several processes run it at once: a transaction-scoped advisory lock
// derived from the schema serializes them. ctx bounds the whole
// migration. It returns the versions it applied.
func Migrate(ctx context.Context, db *sql.DB, opts Tables) (applied []int, err error) {
	if db == nil {
		return nil, ErrNilDB
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	n := newNames(opts)

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, wrap(ctx, "migrate: begin", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if _, err = tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLockKey(opts)); err != nil {
		return nil, wrap(ctx, "migrate: lock", err)
	}
	if _, err = tx.ExecContext(ctx, migrationsTableSQL(n)); err != nil {
		return nil, wrap(ctx, "migrate: create migrations table", err)
	}
	done := make(map[int]bool)
	rows, err := tx.QueryContext(ctx, `SELECT version FROM `+n.Migrations)
	if err != nil {
		return nil, wrap(ctx, "migrate: read versions", err)
	}
	for rows.Next() {
		var v int
		if err = rows.Scan(&v); err != nil {
			rows.Close()
			return nil, wrap(ctx, "migrate: read versions", err)
		}
		done[v] = true
	}
	if err = rows.Err(); err != nil {
		return nil, wrap(ctx, "migrate: read versions", err)
	}
	for _, m := range migrationSteps(n) {
		if done[m.Version] {
			continue
		}
		if _, err = tx.ExecContext(ctx, m.SQL+recordSQL(n, m)); err != nil {
			return nil, wrap(ctx, fmt.Sprintf("migrate: step %d (%s)", m.Version, m.Name), err)
		}
		applied = append(applied, m.Version)
	}
	if err = tx.Commit(); err != nil {
		return nil, wrap(ctx, "migrate: commit", err)
	}
	return applied, nil
}

// migrationLockKey is the advisory lock that serializes migrations. It is per
// schema rather than per outbox because CREATE SCHEMA IF NOT EXISTS itself races
// when two outboxes of one new schema migrate at once.
func migrationLockKey(o Tables) int64 {
	h := fnv.New64a()
	h.Write([]byte("relayer.migrate\x00" + o.Schema))
	return int64(h.Sum64())
}
