package relayerkafka_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that nothing the tests start outlives them: the clusters,
// the clients and the goroutines of sends abandoned at their deadline, which
// end when their client closes.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
