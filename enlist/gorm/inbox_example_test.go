package relayergorm_test

import (
	"context"
	"database/sql"
	"log"

	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/relayer-go/relayer/inbox"
	"github.com/relayer-go/relayer/store"
)

// Example_inbox deduplicates a consumer's deliveries with the inbox: it passes
// the GORM transaction's connection pool.
func Example_inbox() {
	sqldb, err := sql.Open("pgx", "postgres://localhost/billing")
	if err != nil {
		log.Fatal(err)
	}
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqldb}), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	ib, err := inbox.New(store.Tables{Schema: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	messageID := uuid.MustParse("0190a000-0000-7000-8000-000000000001")
	type invoice struct {
		ID      int64
		OrderID string
	}
	err = db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		_, err := ib.Handle(ctx, tx.Statement.ConnPool, "invoicing", messageID, func(ctx context.Context) error {
			return tx.Create(&invoice{OrderID: "o-42"}).Error
		})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
}
