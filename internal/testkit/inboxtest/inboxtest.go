// Package inboxtest is what the inbox's tests share, in the core module and in
// the tests module: a consumer database with an inbox and a counters table
// for handlers to write to, in a schema of its own.
package inboxtest

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/inbox"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

// Bundle is one test's consumer database.
type Bundle struct {
	DB     *sql.DB
	Driver string
	Inbox  *inbox.Inbox
	// Counters is the qualified name of the table handlers count in.
	Counters string
}

// Setup makes a schema with the outbox tables (the inbox among them, prefix
// ib_) and a counters table, on a database opened with driver.
func Setup(t *testing.T, driver string) *Bundle {
	t.Helper()
	db := testdb.Open(t, driver)
	opts := store.Tables{Schema: testdb.NewSchema(t), TablePrefix: "ib_"}
	if _, err := store.Migrate(context.Background(), db, opts); err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	b := &Bundle{DB: db, Driver: driver, Inbox: ib, Counters: `"` + opts.Schema + `".counters`}
	if _, err := db.Exec(`CREATE TABLE ` + b.Counters + ` (id text PRIMARY KEY, n integer NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return b
}

// EachDriver runs f per database/sql driver in parallel subtests.
func EachDriver(t *testing.T, f func(t *testing.T, b *Bundle)) {
	t.Helper()
	for _, driver := range testdb.Drivers() {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			f(t, Setup(t, driver))
		})
	}
}

// NewID returns a new message id.
func NewID(t *testing.T) uuid.UUID {
	t.Helper()
	id, err := relayer.NewID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Increment is the handlers' business write: one more on counter key, in q.
func (b *Bundle) Increment(ctx context.Context, q store.DBTX, key string) error {
	_, err := q.ExecContext(ctx, `INSERT INTO `+b.Counters+` (id, n) VALUES ($1, 1)
ON CONFLICT (id) DO UPDATE SET n = counters.n + 1`, key)
	return err
}

// Count returns counter key, 0 when it was never incremented.
func (b *Bundle) Count(t *testing.T, key string) int {
	t.Helper()
	var n int
	err := b.DB.QueryRow(`SELECT n FROM `+b.Counters+` WHERE id = $1`, key).Scan(&n)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		t.Fatal(err)
	}
	return n
}
