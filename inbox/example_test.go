package inbox_test

import (
	"context"
	"database/sql"
	"log"

	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/inbox"
	"github.com/relayer-go/relayer/store"
)

// Invoice is a consumer's business row.
type Invoice struct {
	bun.BaseModel `bun:"table:invoices"`
	ID            int64
	OrderID       string `db:"order_id"`
}

// consume stands for a broker client's subscription: a nil error from handle
// acknowledges the message, an error asks for redelivery.
func consume(handle func(ctx context.Context, msg *relayer.Message) error) {}

// Example handles each message once per consumer with a plain *sql.Tx: the
// invoice and the inbox record commit together.
func Example() {
	db, err := sql.Open("pgx", "postgres://localhost/billing")
	if err != nil {
		log.Fatal(err)
	}
	ib, err := inbox.New(store.Options{Schema: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	consume(func(ctx context.Context, msg *relayer.Message) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		handled, err := ib.HandleMessage(ctx, tx, "invoicing", msg, func(ctx context.Context) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO invoices (order_id) VALUES ($1)`, string(msg.Body))
			return err
		})
		if err != nil {
			return err // rolled back, record included; the broker redelivers
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		if !handled {
			log.Printf("duplicate delivery of %s skipped", msg.ID)
		}
		return nil // acknowledge
	})
}

// Example_sqlx passes the *sqlx.Tx itself.
func Example_sqlx() {
	db := sqlx.MustOpen("pgx", "postgres://localhost/billing")
	ib, err := inbox.New(store.Options{Schema: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	messageID := uuid.MustParse("0190a000-0000-7000-8000-000000000001")
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	invoice := Invoice{OrderID: "o-42"}
	if _, err := ib.Handle(ctx, tx, "invoicing", messageID, func(ctx context.Context) error {
		_, err := tx.NamedExecContext(ctx, `INSERT INTO invoices (order_id) VALUES (:order_id)`, invoice)
		return err
	}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
}

// Example_bun passes the *sql.Tx embedded in the bun.Tx; the handler keeps
// using bun's query builders.
func Example_bun() {
	sqldb, err := sql.Open("pgx", "postgres://localhost/billing")
	if err != nil {
		log.Fatal(err)
	}
	db := bun.NewDB(sqldb, pgdialect.New())
	ib, err := inbox.New(store.Options{Schema: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	messageID := uuid.MustParse("0190a000-0000-7000-8000-000000000001")
	err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		_, err := ib.Handle(ctx, tx.Tx, "invoicing", messageID, func(ctx context.Context) error {
			_, err := tx.NewInsert().Model(&Invoice{OrderID: "o-42"}).Exec(ctx)
			return err
		})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
}

// Example_gorm passes the GORM transaction's connection pool.
func Example_gorm() {
	sqldb, err := sql.Open("pgx", "postgres://localhost/billing")
	if err != nil {
		log.Fatal(err)
	}
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqldb}), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	ib, err := inbox.New(store.Options{Schema: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	messageID := uuid.MustParse("0190a000-0000-7000-8000-000000000001")
	err = db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		_, err := ib.Handle(ctx, tx.Statement.ConnPool, "invoicing", messageID, func(ctx context.Context) error {
			return tx.Create(&Invoice{OrderID: "o-42"}).Error
		})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
}
