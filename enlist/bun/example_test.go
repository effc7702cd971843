package relayerbun_test

import (
	"context"
	"database/sql"
	"log"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
	relayerbun "github.com/relayer-go/relayer/enlist/bun"
)

type Order struct {
	bun.BaseModel `bun:"table:orders"`
	ID            int64
	CustomerID    string
}

type OrderPlaced struct {
	OrderID int64
}

// openShop returns the shop's bun.DB with the hook of a writer that routes
// OrderPlaced.
func openShop() *bun.DB {
	var routes relayer.Routes
	if err := relayer.AddType[OrderPlaced](&routes, relayer.Route{Transport: "kafka", Destination: "orders.placed", Ordered: true}); err != nil {
		log.Fatal(err)
	}
	w, err := enlist.NewWriter(relayer.Outbox{Routes: &routes}, enlist.Options{})
	if err != nil {
		log.Fatal(err)
	}
	sqldb, err := sql.Open("pgx", "postgres://localhost/shop")
	if err != nil {
		log.Fatal(err)
	}
	return bun.NewDB(sqldb, pgdialect.New()).WithQueryHook(relayerbun.NewHook(w))
}

// Example installs the hook on a bun.DB and publishes an event in the
// transaction that inserts the order, inside db.RunInTx: Publish finds the
// transaction through the context the callback receives. The event reaches
// the writer's listener (the direct dispatcher, in production) once the
// transaction has committed.
func Example() {
	db := openShop()
	ctx := context.Background()
	order := &Order{ID: 42, CustomerID: "c-7"}
	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(order).Exec(ctx); err != nil {
			return err
		}
		return relayerbun.Publish(ctx, tx, OrderPlaced{OrderID: order.ID}, relayer.Key(order.CustomerID))
	})
	if err != nil {
		log.Fatal(err)
	}
}

// ExampleBeginTx publishes in an explicit transaction. Begun by
// relayerbun.BeginTx rather than db.BeginTx, the transaction is registered,
// and Publish finds it with any context.
func ExampleBeginTx() {
	db := openShop()
	ctx := context.Background()
	order := &Order{ID: 43, CustomerID: "c-7"}
	tx, err := relayerbun.BeginTx(ctx, db, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback() // after Commit, only returns sql.ErrTxDone
	if _, err := tx.NewInsert().Model(order).Exec(ctx); err != nil {
		log.Fatal(err)
	}
	if err := relayerbun.Publish(ctx, tx, OrderPlaced{OrderID: order.ID}, relayer.Key(order.CustomerID)); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
}
