package relayerpgx_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/enlist"
	relayerpgx "github.com/relayer-go/relayer/enlist/pgx"
	"github.com/relayer-go/relayer/store"
	"github.com/relayer-go/relayer/transport/memory"
)

// OrderPlaced is a message the example publishes.
type OrderPlaced struct{ ID string }

// MessageType names the type on the wire.
func (OrderPlaced) MessageType() string { return "orders.OrderPlaced" }

// Example is a service that uses pgx only: one pool for its own queries,
// the outbox's writes inside its pgx transactions, and the workers on a
// *sql.DB over the same pool. The in-memory transport stands in for a
// broker's; the database is the test suite's.
func Example() {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(os.Getenv("RELAYER_TEST_DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	cfg.MaxConns = 20 // room for the workers' connections and the service's
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	db := relayerpgx.OpenDB(pool) // for the store and the workers
	defer db.Close()

	var routes relayer.Routes
	if err := relayer.AddType[OrderPlaced](&routes, relayer.Route{Transport: "broker", Destination: "orders.placed"}); err != nil {
		log.Fatal(err)
	}
	broker := memory.New()
	outbox := relayer.Outbox{
		Schema:     "pgx_example_" + strconv.Itoa(os.Getpid()), // a service names its own, such as "messaging"
		Routes:     &routes,
		Transports: map[string]relayer.Transport{"broker": broker},
	}
	if _, err := store.Migrate(ctx, db, store.TablesOf(outbox)); err != nil {
		log.Fatal(err)
	}
	defer pool.Exec(ctx, `DROP SCHEMA `+outbox.Schema+` CASCADE`) // this run's own; a service keeps its tables

	runner, err := dispatch.NewRunner(db, outbox, dispatch.RunnerOptions{})
	if err != nil {
		log.Fatal(err)
	}
	writer, err := enlist.NewWriter(outbox, enlist.Options{Listener: runner})
	if err != nil {
		log.Fatal(err)
	}
	if err := runner.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := runner.Stop(stopCtx); err != nil {
			log.Print(err)
		}
	}()

	// The business row and the message commit together, in a pgx transaction.
	w := relayerpgx.NewWriter(writer)
	err = w.RunInTx(ctx, pool, pgx.TxOptions{}, func(tx *relayerpgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE orders (id text)`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, "o-1"); err != nil {
			return err
		}
		return tx.Publish(ctx, OrderPlaced{ID: "o-1"})
	})
	if err != nil {
		log.Fatal(err)
	}

	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := broker.WaitFor(waitCtx, 1); err != nil {
		log.Fatal(err)
	}
	m := broker.All()[0]
	fmt.Println(m.Destination, string(m.Body))
	// Output: orders.placed {"ID":"o-1"}
}
