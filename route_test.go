package relayer_test

import (
	"slices"
	"testing"

	"github.com/relayer-go/relayer"
)

// Types named after their Go type, and only those, are listed for warnings;
// clones keep the list.
func TestRoutesListGoNamedTypes(t *testing.T) {
	t.Parallel()
	var r relayer.Routes
	route := relayer.Route{Transport: "nats", Destination: "d"}
	for _, err := range []error{
		relayer.AddType[OrderCreated](&r, route),
		relayer.AddType[named](&r, route),
		relayer.AddType[*pointerNamed](&r, route),
		r.Add("billing.InvoiceSent", route),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"relayer_test.OrderCreated"}
	if got := r.GoNamed(); !slices.Equal(got, want) {
		t.Errorf("GoNamed = %v, want %v", got, want)
	}
	if got := r.Clone().GoNamed(); !slices.Equal(got, want) {
		t.Errorf("Clone().GoNamed = %v, want %v", got, want)
	}
}
