package relayerbun_test

import (
	"context"
	"database/sql"
	"log"

	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/relayer-go/relayer/inbox"
	"github.com/relayer-go/relayer/store"
)

// invoice is a consumer's business row.
type invoice struct {
	bun.BaseModel `bun:"table:invoices"`
	ID            int64
	OrderID       string
}

// Example_inbox deduplicates a consumer's deliveries with the inbox: it
// passes the *sql.Tx embedded in the bun.Tx, and the handler keeps using
// bun's query builders.
func Example_inbox() {
	sqldb, err := sql.Open("pgx", "postgres://localhost/billing")
	if err != nil {
		log.Fatal(err)
	}
	db := bun.NewDB(sqldb, pgdialect.New())
	ib, err := inbox.New(store.Tables{Schema: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	messageID := uuid.MustParse("0190a000-0000-7000-8000-000000000001")
	err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		_, err := ib.Handle(ctx, tx.Tx, "invoicing", messageID, func(ctx context.Context) error {
			_, err := tx.NewInsert().Model(&invoice{OrderID: "o-42"}).Exec(ctx)
			return err
		})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
}
