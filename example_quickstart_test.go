package relayer_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"strconv"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
	"github.com/relayer-go/relayer/transport/memory"
)

// TestMain gives the quick start a database: the test suite's, or a
// throwaway cluster.
func TestMain(m *testing.M) { testdb.Main(m) }

// OrderPlaced is a message the example publishes.
type OrderPlaced struct{ ID string }

// MessageType names the type on the wire, for consumers in other services,
// whatever the Go package and type are called.
func (OrderPlaced) MessageType() string { return "orders.OrderPlaced" }

// exampleSchema is a schema of this test run's own, so that runs can overlap;
// a service names its own (for example "messaging").
var exampleSchema = "quickstart_" + strconv.Itoa(os.Getpid())

// Example is the quick start: routes, the outbox, its tables, a runner for
// the workers, and a business transaction that publishes a message. The
// in-memory transport stands in for a broker's (transport/nats, /kafka,
// /amqp); the database is the test suite's.
func Example() {
	ctx := context.Background()
	db, err := sql.Open("pgx", os.Getenv("RELAYER_TEST_DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	var routes relayer.Routes
	if err := relayer.AddType[OrderPlaced](&routes, relayer.Route{Transport: "broker", Destination: "orders.placed"}); err != nil {
		log.Fatal(err)
	}
	broker := memory.New()
	outbox := relayer.Outbox{
		Schema:     exampleSchema,
		Routes:     &routes,
		Transports: map[string]relayer.Transport{"broker": broker},
	}

	// Once: create or upgrade the tables (or feed store.SchemaSQL to a
	// migration tool).
	if _, err := store.Migrate(ctx, db, store.TablesOf(outbox)); err != nil {
		log.Fatal(err)
	}
	defer db.ExecContext(ctx, `DROP SCHEMA `+exampleSchema+` CASCADE`) // this run's own; a service keeps its tables

	// The workers: direct dispatch, recovery, ordered lanes and cleanup.
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
		if err := runner.Stop(stopCtx); err != nil { // drains what is queued
			log.Print(err)
		}
	}()

	// The business row and the message commit together, or not at all.
	err = writer.RunInTx(ctx, db, nil, func(tx *enlist.Tx) error {
		if _, err := tx.ExecContext(ctx, `CREATE TEMP TABLE orders (id text)`); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES ($1)`, "o-1"); err != nil {
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
