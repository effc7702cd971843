package relayergorm_test

import (
	"context"
	"log"
	"os"
	"strconv"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
	relayergorm "github.com/relayer-go/relayer/enlist/gorm"
)

type InvoiceIssued struct {
	InvoiceID int64
	Customer  string
}

type InvoicePaid struct{ InvoiceID int64 }

// Invoice is a model that records its domain events.
type Invoice struct {
	ID       int64
	Customer string
	Paid     bool
	relayergorm.Messages
}

func (inv *Invoice) Pay() {
	inv.Paid = true
	inv.Record(InvoicePaid{InvoiceID: inv.ID}, relayer.Key(inv.Customer))
}

// openInvoices opens GORM with the plugin for an outbox in schema "billing".
func openInvoices() (*gorm.DB, error) {
	var routes relayer.Routes
	if err := relayer.AddType[InvoiceIssued](&routes, relayer.Route{Transport: "nats", Destination: "invoices.issued", Ordered: true}); err != nil {
		return nil, err
	}
	if err := relayer.AddType[InvoicePaid](&routes, relayer.Route{Transport: "nats", Destination: "invoices.paid", Ordered: true}); err != nil {
		return nil, err
	}
	// In a service, Options.Listener is the direct dispatcher.
	writer, err := enlist.NewWriter(relayer.Outbox{Schema: "billing", Routes: &routes}, enlist.Options{})
	if err != nil {
		return nil, err
	}
	db, err := gorm.Open(postgres.Open(os.Getenv("DATABASE_URL")), &gorm.Config{})
	if err != nil {
		return nil, err
	}
	if err := db.Use(relayergorm.Plugin(writer)); err != nil {
		return nil, err
	}
	return db, nil
}

// Publishing explicitly in a transaction.
func Example() {
	db, err := openInvoices()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	inv := Invoice{ID: 42, Customer: "c-7"}
	err = db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&inv).Error; err != nil {
			return err
		}
		return relayergorm.Publish(tx, InvoiceIssued{InvoiceID: inv.ID, Customer: inv.Customer}, relayer.Key(inv.Customer))
	})
	if err != nil {
		log.Fatal(err)
	}
}

// Domain events: the messages a model records are published with its next
// Create, Update or Delete, here in GORM's implicit transaction.
func ExampleMessages() {
	db, err := openInvoices()
	if err != nil {
		log.Fatal(err)
	}
	var inv Invoice
	if err := db.First(&inv, 42).Error; err != nil {
		log.Fatal(err)
	}
	inv.Pay()
	if err := db.Save(&inv).Error; err != nil {
		log.Fatal(err)
	}
	log.Println("invoice " + strconv.FormatInt(inv.ID, 10) + " paid")
}
