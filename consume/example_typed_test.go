package consume_test

import (
	"context"
	"fmt"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
)

// ShipmentBooked is a message another service's outbox published.
type ShipmentBooked struct {
	Order   string `json:"order"`
	Carrier string `json:"carrier"`
}

// MessageType names the message as the producer routes it.
func (ShipmentBooked) MessageType() string { return "shipping.ShipmentBooked" }

// A consumer of several message types registers one typed handler each;
// the Mux decodes each message into its handler's type, and dead-letters
// what it cannot decode or has no handler for. Here the handlers run
// without a database, with a string for a transaction.
func ExampleMux() {
	mux := consume.NewMux[string](nil)
	err := consume.On(mux, func(_ context.Context, tx string, _ *relayer.Message, s ShipmentBooked) error {
		fmt.Printf("%s: order %s ships with %s\n", tx, s.Order, s.Carrier)
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	_ = mux.Handle(ctx, "tx1", &relayer.Message{Type: "shipping.ShipmentBooked", Body: []byte(`{"order":"o-7","carrier":"acme"}`)})
	err = mux.Handle(ctx, "tx2", &relayer.Message{Type: "shipping.ShipmentLost", Body: []byte(`{}`)})
	fmt.Println(err)
	// Output:
	// tx1: order o-7 ships with acme
	// consume: no handler for the message's type: "shipping.ShipmentLost" (this consumer handles shipping.ShipmentBooked)
}
