package relayerpgx_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/enlist/enlisttest"
	relayerpgx "github.com/relayer-go/relayer/enlist/pgx"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

// outbox migrates an outbox in a schema of its own and returns a writer
// whose listener records the notifications.
func outbox(t *testing.T, db *sql.DB) (relayer.Outbox, *enlist.Writer, *enlisttest.Recorder) {
	t.Helper()
	var routes relayer.Routes
	if err := relayer.AddType[enlisttest.Placed](&routes, relayer.Route{Transport: "mem", Destination: "orders.placed"}); err != nil {
		t.Fatal(err)
	}
	if err := relayer.AddType[enlisttest.Shipped](&routes, relayer.Route{Transport: "mem", Destination: "orders.shipped", Ordered: true}); err != nil {
		t.Fatal(err)
	}
	ob := relayer.Outbox{Schema: testdb.NewSchema(t), Routes: &routes, Lanes: enlisttest.Lanes}
	if _, err := store.Migrate(context.Background(), db, store.TablesOf(ob)); err != nil {
		t.Fatal(err)
	}
	rec := &enlisttest.Recorder{Opts: store.TablesOf(ob)}
	w, err := enlist.NewWriter(ob, enlist.Options{Listener: rec})
	if err != nil {
		t.Fatal(err)
	}
	return ob, w, rec
}

// messages returns n messages using every stored field, with fixed ids.
func messages(n int) []relayer.Outgoing {
	msgs := make([]relayer.Outgoing, n)
	deliver := time.Date(2031, 5, 6, 7, 8, 9, 123456789, time.UTC)
	for i := range msgs {
		id := uuid.Must(relayer.NewID())
		switch i % 3 {
		case 0:
			msgs[i] = relayer.NewOutgoing(enlisttest.Placed{N: i}, relayer.WithID(id))
		case 1:
			msgs[i] = relayer.NewOutgoing(enlisttest.Shipped{N: i}, relayer.WithID(id), relayer.Key(fmt.Sprintf("k-ü-%d", i%7)),
				relayer.Header("bin", []byte{0, 0xff, '\\', '"'}), relayer.Header("empty", []byte{}))
		default:
			msgs[i] = relayer.NewOutgoing(enlisttest.Placed{N: i}, relayer.WithID(id), relayer.Key("unordered"), relayer.DeliverAt(deliver))
		}
	}
	return msgs
}

// columns returns every stored column but the creation time, as text, in
// id order.
func columns(t *testing.T, db *sql.DB, schema string) [][]string {
	t.Helper()
	rows, err := db.Query(`SELECT id::text, message_type, transport, destination, encode(body, 'hex'), encode(headers, 'hex'),
		coalesce(ordering_key, '<null>'), coalesce(lane::text, '<null>'), coalesce(deliver_at::text, '<null>'),
		coalesce(trace_parent, '<null>'), coalesce(trace_state, '<null>')
		FROM "` + schema + `".outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var all [][]string
	for rows.Next() {
		r := make([]string, 11)
		ptrs := make([]any, len(r))
		for i := range r {
			ptrs[i] = &r[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		all = append(all, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return all
}

// TestStoresWhatDatabaseSQLStores publishes the same messages through
// database/sql and through pgx, in a multi-row VALUES list (up to 128) and in
// column arrays (more), and compares every stored column.
func TestStoresWhatDatabaseSQLStores(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, "pgx")
	pool := newPool(t)
	ctx := context.Background()
	for _, n := range []int{1, 10, 200} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			msgs := messages(n)
			viaSQL, sqlWriter, _ := outbox(t, db)
			viaPgx, pgxWriter, _ := outbox(t, db)
			if err := sqlWriter.RunInTx(ctx, db, nil, func(tx *enlist.Tx) error { return tx.PublishAll(ctx, msgs...) }); err != nil {
				t.Fatal(err)
			}
			if err := relayerpgx.NewWriter(pgxWriter).RunInTx(ctx, pool, pgx.TxOptions{}, func(tx *relayerpgx.Tx) error {
				return tx.PublishAll(ctx, msgs...)
			}); err != nil {
				t.Fatal(err)
			}
			want, got := columns(t, db, viaSQL.Schema), columns(t, db, viaPgx.Schema)
			if len(got) != n {
				t.Fatalf("pgx stored %d rows, want %d", len(got), n)
			}
			for i := range want {
				if !slices.Equal(got[i], want[i]) {
					t.Errorf("row %d through pgx:\n%q\nthrough database/sql:\n%q", i, got[i], want[i])
				}
			}
		})
	}
}

// TestNotifiesAfterOutermostCommitOnly checks that a savepoint's commit (a
// RELEASE) tells the listener nothing, and the outermost commit tells it
// once, about the rows of every savepoint kept.
func TestNotifiesAfterOutermostCommitOnly(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, "pgx")
	_, w, rec := outbox(t, db)
	pool := newPool(t)
	ctx := context.Background()
	tx, err := relayerpgx.NewWriter(w).Begin(ctx, pool, pgx.TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	err = pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
		if err := relayerpgx.Publish(ctx, sp, enlisttest.Placed{N: 1}); err != nil {
			return err
		}
		// Two levels deep, through the method.
		return sp.(*relayerpgx.Tx).RunInTx(ctx, func(sp2 *relayerpgx.Tx) error {
			if !sp2.Nested() {
				t.Error("a savepoint says it is not nested")
			}
			return sp2.Publish(ctx, enlisttest.Placed{N: 2})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Batches()); n != 0 {
		t.Fatalf("notified %d times before the outermost commit", n)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if b := rec.Batches(); len(b) != 1 || len(b[0]) != 2 {
		t.Fatalf("notifications %v, want one of 2 rows", b)
	}
	if err := tx.Publish(ctx, enlisttest.Placed{N: 3}); !errors.Is(err, relayer.ErrNotInTransaction) {
		t.Errorf("Publish after commit = %v, want ErrNotInTransaction", err)
	}
}

func TestPublishNeedsARelayerTx(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	err = relayerpgx.Publish(ctx, tx, enlisttest.Placed{})
	if !errors.Is(err, relayer.ErrNotInTransaction) {
		t.Errorf("Publish in a plain pgx.Tx = %v, want ErrNotInTransaction", err)
	}
	var nilTx *relayerpgx.Tx
	if err := nilTx.Publish(ctx, enlisttest.Placed{}); !errors.Is(err, relayer.ErrNotInTransaction) {
		t.Errorf("Publish on a nil Tx = %v, want ErrNotInTransaction", err)
	}
}

func TestOpenDBIsBoundedLikeThePool(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	db := relayerpgx.OpenDB(pool)
	defer db.Close()
	if got := db.Stats().MaxOpenConnections; got != 10 {
		t.Errorf("MaxOpenConnections = %d, want the pool's 10", got)
	}
	if err := db.PingContext(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// countingPool opens a pool whose connections count their writes to the
// server: pgx flushes once per round trip.
func countingPool(tb testing.TB, maxConns int32) (*pgxpool.Pool, *atomic.Int64) {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(testdb.URL(tb))
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MaxConns = maxConns
	writes := new(atomic.Int64)
	cfg.ConnConfig.DialFunc = testdb.CountingDial(writes)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool, writes
}

// TestOnePublishOneRoundTrip counts the round trips of a publish of 1 to 500
// messages, once pgx has its statement prepared.
func TestOnePublishOneRoundTrip(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, "pgx")
	_, w, _ := outbox(t, db)
	pool, writes := countingPool(t, 1)
	pw := relayerpgx.NewWriter(w)
	ctx := context.Background()
	for _, n := range []int{1, 10, 100, 500} {
		var trips [2]int64
		for round := range trips {
			msgs := messages(n)
			err := pw.RunInTx(ctx, pool, pgx.TxOptions{}, func(tx *relayerpgx.Tx) error {
				before := writes.Load()
				err := tx.PublishAll(ctx, msgs...)
				trips[round] = writes.Load() - before
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if trips[1] != 1 {
			t.Errorf("%d messages: %d round trips once prepared (first time %d), want 1", n, trips[1], trips[0])
		}
	}
}
