package relayergorm_test

import (
	"context"
	"log"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
	relayergorm "github.com/relayer-go/relayer/enlist/gorm"
	"github.com/relayer-go/relayer/store"
)

// Receipt is the billing service's model.
type Receipt struct {
	ID      int64
	OrderID string
}

// A consumer whose handler creates a model with GORM, in the transaction
// that records the message in the inbox; with the plugin installed, it
// could publish follow-ups there too (relayergorm.Publish).
func ExampleNewConsumer() {
	db, err := gorm.Open(postgres.Open("postgres://localhost/billing"), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	c, err := relayergorm.NewConsumer(db, func(ctx context.Context, tx *gorm.DB, m *relayer.Message) error {
		return tx.Create(&Receipt{OrderID: string(m.Body)}).Error
	}, consume.Options{Name: "billing", Tables: store.Tables{Schema: "billing"}})
	if err != nil {
		log.Fatal(err)
	}
	_ = c // hand it to a broker's adapter: relayernats.Consume, relayerkafka.Consume, relayeramqp.Consume
}
