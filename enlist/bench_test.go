package enlist_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/enlist/enlisttest"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

// BenchmarkEnlistmentCost measures what enlisting adds to a business
// transaction that inserts one row: the same transaction alone, with one
// message, and with ten (one PublishAll). Compare the ns/op of the three in one
// run; round-trips/op counts the client's flushes to the server.
func BenchmarkEnlistmentCost(b *testing.B) {
	db, writes := testdb.OpenCounting(b)
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	schema := testdb.NewSchema(b)
	opts := store.Tables{Schema: schema}
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
	for _, n := range []int{0, 1, 10, 100} {
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
