package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"strings"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/store"
)

// Migrate creates or upgrades an outbox's tables; run it once at deployment
// or start-up, from the same relayer.Outbox value the writers and workers use.
func ExampleMigrate() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://localhost/orders")
	if err != nil {
		log.Fatal(err)
	}
	outbox := relayer.Outbox{Schema: "messaging", TablePrefix: "orders_"}
	applied, err := store.Migrate(ctx, db, store.TablesOf(outbox))
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("%d schema steps applied", len(applied))
}

// SchemaSQL prints the DDL instead, for a migration tool.
func ExampleSchemaSQL() {
	ddl, err := store.SchemaSQL(store.Tables{Schema: "messaging", TablePrefix: "orders_"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(strings.Contains(ddl, `CREATE TABLE IF NOT EXISTS "messaging"."orders_outbox"`))
	// Output: true
}
