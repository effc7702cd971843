package dispatch_test

import (
	"fmt"

	"github.com/relayer-go/relayer/dispatch"
)

// The most messages one fault can make a Runner send again, with the
// default options and with smaller takes: a killed session at most
// PerSession, a crash of the process at most Total.
func ExampleRunnerOptions_InFlight() {
	fmt.Printf("%+v\n", dispatch.RunnerOptions{}.InFlight())
	fmt.Printf("%+v\n", dispatch.RunnerOptions{
		Recovery: dispatch.RecoveryOptions{BatchSize: 200},
		Ordered:  dispatch.OrderedOptions{BatchSize: 20},
	}.InFlight())
	// Output:
	// {PerSession:1600 Total:5300}
	// {PerSession:320 Total:1140}
}
