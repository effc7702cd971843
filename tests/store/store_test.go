package store_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// bundle is one test's outbox: its own schema, migrated, on one driver.
type bundle struct {
	driver string // the database/sql driver's name
	db     *sql.DB
	store  *workerstore.Store
	opts   store.Tables
	t0     time.Time // a fixed instant the test reasons from
	// heldKeys are the keys a laneRound's settle held (parked, or made wait
	// for a retry), for the cursor's digest; laneRound takes them.
	heldKeys []string
}

func setup(t *testing.T, driver string) *bundle {
	t.Helper()
	db := testdb.Open(t, driver)
	opts := store.Tables{Schema: testdb.NewSchema(t), TablePrefix: "orders_"}
	ctx := context.Background()
	if _, err := store.Migrate(ctx, db, opts); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	s, err := workerstore.New(db, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &bundle{driver: driver, db: db, store: s, opts: opts, t0: time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC)}
}

// eachDriver runs f once per database/sql driver, in parallel subtests: the
// store's conformance suite.
func eachDriver(t *testing.T, f func(t *testing.T, b *bundle)) {
	t.Helper()
	for _, driver := range testdb.Drivers() {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			f(t, setup(t, driver))
		})
	}
}

func newID(t *testing.T) uuid.UUID {
	t.Helper()
	id, err := relayer.NewID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// unordered returns a valid unordered message created at t0.
func (b *bundle) unordered(t *testing.T) relayer.Message {
	return relayer.Message{
		ID:          newID(t),
		Type:        "orders.OrderPlaced",
		Body:        []byte(`{"id":1}`),
		Headers:     []headers.Header{{Name: "content-type", Value: []byte("application/json")}},
		Transport:   "nats",
		Destination: "orders.placed",
		CreatedAt:   b.t0,
	}
}

func (b *bundle) ordered(t *testing.T, key string, lanes int) relayer.Message {
	m := b.unordered(t)
	lane, err := relayer.Lane(key, lanes)
	if err != nil {
		t.Fatal(err)
	}
	m.Key, m.Ordered, m.Lane = key, true, lane
	return m
}

func (b *bundle) insert(t *testing.T, msgs ...relayer.Message) {
	t.Helper()
	if err := b.store.Insert(context.Background(), msgs); err != nil {
		t.Fatalf("Insert: %v", err)
	}
}

func (b *bundle) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	query = strings.ReplaceAll(query, "$outbox", `"`+b.opts.Schema+`"."`+b.opts.TablePrefix+`outbox"`)
	query = strings.ReplaceAll(query, "$dead", `"`+b.opts.Schema+`"."`+b.opts.TablePrefix+`dead"`)
	query = strings.ReplaceAll(query, "$pauses", `"`+b.opts.Schema+`"."`+b.opts.TablePrefix+`relayer_pauses"`)
	if _, err := b.db.Exec(query, args...); err != nil {
		t.Fatalf("exec %q: %v", query, err)
	}
}

func (b *bundle) readUnordered(t *testing.T, now time.Time) []store.Row {
	t.Helper()
	rows, err := b.store.ReadUnordered(context.Background(), nil, store.ReadOptions{Now: now, Limit: 1000})
	if err != nil {
		t.Fatalf("ReadUnordered: %v", err)
	}
	return rows
}

func (b *bundle) count(t *testing.T, now time.Time) int64 {
	t.Helper()
	n, err := b.store.CountEligible(context.Background(), now)
	if err != nil {
		t.Fatalf("CountEligible: %v", err)
	}
	return n
}

func ids(rows []store.Row) []uuid.UUID {
	out := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

func sortedIDs(msgs ...relayer.Message) []uuid.UUID {
	out := make([]uuid.UUID, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	slices.SortFunc(out, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	return out
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 64)
	for _, tc := range []struct {
		opts  store.Tables
		field string // "" when valid
	}{
		{store.Tables{}, ""},
		{store.Tables{Schema: "messaging", TablePrefix: "orders_"}, ""},
		{store.Tables{Schema: "_x9", TablePrefix: "_"}, ""},
		{store.Tables{Schema: strings.Repeat("s", 63), TablePrefix: strings.Repeat("p", store.TablePrefixMaxLen)}, ""},
		{store.Tables{Schema: "Messaging"}, "Schema"},
		{store.Tables{Schema: `x"; DROP TABLE users; --`}, "Schema"},
		{store.Tables{Schema: "9lives"}, "Schema"},
		{store.Tables{Schema: "a-b"}, "Schema"},
		{store.Tables{Schema: long}, "Schema"},
		{store.Tables{Schema: "pg_temp"}, "Schema"},
		{store.Tables{Schema: "ok", TablePrefix: "orders."}, "TablePrefix"},
		{store.Tables{TablePrefix: `"x`}, "TablePrefix"},
		{store.Tables{TablePrefix: "é_"}, "TablePrefix"},
		{store.Tables{TablePrefix: strings.Repeat("p", store.TablePrefixMaxLen+1)}, "TablePrefix"},
	} {
		err := tc.opts.Validate()
		if tc.field == "" {
			if err != nil {
				t.Errorf("Validate(%+v) = %v, want nil", tc.opts, err)
			}
			continue
		}
		if !errors.Is(err, store.ErrInvalidOptions) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalidOptions naming %s", tc.opts, err, tc.field)
		}
		if _, err := workerstore.New(&sql.DB{}, tc.opts); !errors.Is(err, store.ErrInvalidOptions) {
			t.Errorf("New(%+v) = %v, want ErrInvalidOptions", tc.opts, err)
		}
		if _, err := store.SchemaSQL(tc.opts); !errors.Is(err, store.ErrInvalidOptions) {
			t.Errorf("SchemaSQL(%+v) = %v, want ErrInvalidOptions", tc.opts, err)
		}
	}
}

func TestNilDB(t *testing.T) {
	t.Parallel()
	var db *sql.DB
	if _, err := workerstore.New(db, store.Tables{}); !errors.Is(err, store.ErrNilDB) {
		t.Errorf("New(nil *sql.DB) = %v, want ErrNilDB", err)
	}
	if _, err := workerstore.New(nil, store.Tables{}); !errors.Is(err, store.ErrNilDB) {
		t.Errorf("New(nil) = %v, want ErrNilDB", err)
	}
	if _, err := store.Migrate(context.Background(), nil, store.Tables{}); !errors.Is(err, store.ErrNilDB) {
		t.Errorf("Migrate(nil) = %v, want ErrNilDB", err)
	}
}

// TestIdentifierLengths proves that the longest accepted schema and prefix give
// names PostgreSQL keeps whole (it silently truncates names over 63 bytes, which
// would let two outboxes collide).
func TestIdentifierLengths(t *testing.T) {
	t.Parallel()
	b := setup(t, "pgx")
	opts := store.Tables{Schema: b.opts.Schema, TablePrefix: strings.Repeat("p", store.TablePrefixMaxLen)}
	if _, err := store.Migrate(context.Background(), b.db, opts); err != nil {
		t.Fatalf("Migrate with the longest prefix: %v", err)
	}
	var n int
	err := b.db.QueryRow(`SELECT count(*) FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
		WHERE s.nspname = $1 AND c.relname LIKE $2`, opts.Schema, opts.TablePrefix+"%").Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	sqlText, _ := store.SchemaSQL(opts)
	want := strings.Count(sqlText, "CREATE TABLE") + strings.Count(sqlText, "CREATE INDEX") + strings.Count(sqlText, "PRIMARY KEY") -
		strings.Count(sqlText, "DROP INDEX") + strings.Count(sqlText, "GENERATED ALWAYS AS IDENTITY")
	if n != want {
		t.Errorf("found %d relations named with the long prefix, want %d (tables, indexes, primary keys and identity sequences)", n, want)
	}
}

// Rows read together share allocations for their bodies and headers; each
// row's slices must still be its own: appending to one never changes another.
func TestRowsReadTogetherDoNotOverlap(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		var msgs []relayer.Message
		for i := range 3 {
			m := b.unordered(t)
			m.Body = []byte(fmt.Sprintf("body-%d", i))
			m.Headers = []headers.Header{{Name: "n", Value: []byte(fmt.Sprintf("v%d", i))}}
			msgs = append(msgs, m)
		}
		b.insert(t, msgs...)
		rows := b.readUnordered(t, b.t0)
		if len(rows) != 3 {
			t.Fatalf("read %d rows", len(rows))
		}
		_ = append(rows[0].Body, "XXXXXXXX"...)
		_ = append(rows[0].Headers[0].Value, "XXXXXXXX"...)
		for i, r := range rows {
			if string(r.Body) != fmt.Sprintf("body-%d", i) || string(r.Headers[0].Value) != fmt.Sprintf("v%d", i) {
				t.Errorf("row %d: body %q, header %q", i, r.Body, r.Headers[0].Value)
			}
		}
	})
}
