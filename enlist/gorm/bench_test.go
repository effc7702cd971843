package relayergorm_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/enlist/enlisttest"
	relayergorm "github.com/relayer-go/relayer/enlist/gorm"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

// BenchmarkEnlistmentCost is the GORM twin of the enlist package's benchmark:
// one db.Transaction inserting one business row, alone, with one message and
// with ten (one PublishAll). Compare ns/op within one run; round-trips/op
// counts the client's flushes to the server.
func BenchmarkEnlistmentCost(b *testing.B) {
	sqlDB, writes := testdb.OpenCounting(b)
	sqlDB.SetMaxOpenConns(1)
	ctx := context.Background()
	schema := testdb.NewSchema(b)
	if _, err := store.Migrate(ctx, sqlDB, store.Tables{Schema: schema}); err != nil {
		b.Fatal(err)
	}
	if _, err := sqlDB.Exec(`CREATE TABLE "` + schema + `".orders (id bigint PRIMARY KEY)`); err != nil {
		b.Fatal(err)
	}
	var routes relayer.Routes
	_ = relayer.AddType[enlisttest.Placed](&routes, relayer.Route{Transport: "mem", Destination: "orders"})
	w, err := enlist.NewWriter(relayer.Outbox{Schema: schema, Routes: &routes}, enlist.Options{})
	if err != nil {
		b.Fatal(err)
	}
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		b.Fatal(err)
	}
	if err := db.Use(relayergorm.Plugin(w)); err != nil {
		b.Fatal(err)
	}
	insert := `INSERT INTO "` + schema + `".orders (id) VALUES (?)`
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
				err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
					if err := tx.Exec(insert, id).Error; err != nil {
						return err
					}
					if n == 0 {
						return nil
					}
					return relayergorm.PublishAll(tx, msgs...)
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(writes.Load()-start)/float64(b.N), "round-trips/op")
		})
	}
}
