package enlist_test

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/enlist/enlisttest"
	"github.com/relayer-go/relayer/internal/testdb"
	"github.com/relayer-go/relayer/store"
)

// countingConn counts the writes a connection makes; pgx flushes once per round
// trip, so writes per transaction are its round trips.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// openCounting opens a pgx database/sql pool on the test database whose
// connections count their round trips.
func openCounting(b *testing.B) (*sql.DB, *atomic.Int64) {
	cfg, err := pgx.ParseConfig(testdb.URL(b))
	if err != nil {
		b.Fatal(err)
	}
	writes := new(atomic.Int64)
	dialer := &net.Dialer{}
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: conn, writes: writes}, nil
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(1)
	b.Cleanup(func() { db.Close() })
	return db, writes
}

// BenchmarkEnlistmentCost measures what enlisting adds to a business
// transaction that inserts one row: the same transaction alone, with one
// message, and with ten (one PublishAll). Compare the ns/op of the three in one
// run; round-trips/op counts the client's flushes to the server.
func BenchmarkEnlistmentCost(b *testing.B) {
	db, writes := openCounting(b)
	ctx := context.Background()
	schema := testdb.NewSchema(b)
	opts := store.Options{Schema: schema}
	if _, err := store.Migrate(ctx, db, opts); err != nil {
		b.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE "`+schema+`".orders (id bigint PRIMARY KEY)`); err != nil {
		b.Fatal(err)
	}
	var routes relayer.Routes
	_ = relayer.AddType[enlisttest.Placed](&routes, relayer.Route{Transport: "mem", Destination: "orders"})
	w, err := enlist.NewWriter(relayer.Outbox{Schema: schema, Routes: &routes}, enlist.Options{})
	if err != nil {
		b.Fatal(err)
	}
	insert := `INSERT INTO "` + schema + `".orders (id) VALUES ($1)`
	var next atomic.Int64
	for _, n := range []int{0, 1, 10} {
		b.Run(fmt.Sprintf("messages=%d", n), func(b *testing.B) {
			msgs := make([]relayer.Outgoing, n)
			b.ReportAllocs()
			start := writes.Load()
			for b.Loop() {
				id := next.Add(1)
				for i := range msgs {
					msgs[i] = relayer.NewOutgoing(enlisttest.Placed{N: int(id)})
				}
				err := w.RunInTx(ctx, db, nil, func(tx *enlist.Tx) error {
					if _, err := tx.ExecContext(ctx, insert, id); err != nil {
						return err
					}
					if n == 0 {
						return nil
					}
					return tx.PublishAll(ctx, msgs...)
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(writes.Load()-start)/float64(b.N), "round-trips/op")
		})
	}
}
