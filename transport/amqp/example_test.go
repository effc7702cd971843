package relayeramqp_test

import (
	"fmt"
	"log"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relayer-go/relayer"
	relayeramqp "github.com/relayer-go/relayer/transport/amqp"
)

// Orders are published to the "orders" exchange with the routing key
// "orders.placed"; a consumer binds its queue to that key.
func Example() {
	conn, err := amqp.Dial("amqp://guest:guest@localhost:5672/")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close() // the connection is the application's

	rabbit, err := relayeramqp.New(conn, relayeramqp.Options{Exchange: "orders"})
	if err != nil {
		log.Fatal(err)
	}
	defer rabbit.Close() // closes the transport's channels only

	var routes relayer.Routes
	if err := routes.Add("orders.Placed", relayer.Route{
		Transport:   "rabbitmq",
		Destination: "orders.placed", // the routing key
		Ordered:     true,
	}); err != nil {
		log.Fatal(err)
	}
	outbox := relayer.Outbox{
		Routes:     &routes,
		Transports: map[string]relayer.Transport{"rabbitmq": rabbit},
	}
	_ = outbox // hand it to the writer and the dispatchers
}

// A consumer reads the relayer id and headers back from a delivery.
func ExampleHeaders() {
	d := amqp.Delivery{
		MessageId: "0190a5d2-6a4b-7c3e-9f10-2b3c4d5e6f70",
		Headers: amqp.Table{
			"content-type":        "application/json",
			"tag":                 []any{"a", "b"},
			"signature":           []byte{0xff, 0x00},
			relayeramqp.HeaderKey: "customer-42",
		},
	}
	id, err := relayeramqp.MessageID(d)
	fmt.Println(id, err)
	hs, err := relayeramqp.Headers(d.Headers)
	for _, h := range hs {
		fmt.Printf("%s=%q\n", h.Name, h.Value)
	}
	fmt.Println(err)
	// Output:
	// 0190a5d2-6a4b-7c3e-9f10-2b3c4d5e6f70 <nil>
	// content-type="application/json"
	// relayer-key="customer-42"
	// signature="\xff\x00"
	// tag="a"
	// tag="b"
	// <nil>
}
