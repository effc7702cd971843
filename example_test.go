package relayer_test

import (
	"fmt"

	"github.com/relayer-go/relayer"
)

type CustomerRegistered struct{ Email string }

func ExampleRoutes() {
	var routes relayer.Routes
	if err := relayer.AddType[CustomerRegistered](&routes, relayer.Route{
		Transport:   "nats",
		Destination: "customers.registered",
		Ordered:     true,
	}); err != nil {
		panic(err)
	}
	route, err := routes.Lookup(relayer.TypeOf(CustomerRegistered{Email: "a@example.com"}))
	fmt.Println(route.Transport, route.Destination, route.Ordered, err)

	_, err = routes.Lookup("billing.InvoiceSent")
	fmt.Println(err)
	// Output:
	// nats customers.registered true <nil>
	// relayer: no route for message type "billing.InvoiceSent"
}

func ExampleLane() {
	lane, err := relayer.Lane("customer-42", 32)
	fmt.Println(lane, err)
	// Output: 30 <nil>
}
