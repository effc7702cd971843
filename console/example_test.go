package console_test

import (
	"database/sql"
	"log"
	"net/http"
	"os"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/relayer-go/relayer/console"
	"github.com/relayer-go/relayer/store"
)

// Example mounts the console of the outbox in schema "messaging" under
// /ops/outbox/ of a service's own server, behind a token and without
// actions.
func Example() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	c, err := console.New(db, store.Tables{Schema: "messaging"}, console.Options{
		Token:    os.Getenv("OUTBOX_CONSOLE_TOKEN"),
		ReadOnly: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/outbox/", http.StripPrefix("/ops/outbox", c))
	log.Fatal(http.ListenAndServe("127.0.0.1:8081", mux))
}
