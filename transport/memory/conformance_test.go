package memory_test

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/transport/memory"
	"github.com/relayer-go/relayer/transport/transporttest"
)

// refusedHeader marks the messages the conformance suite wants refused; the
// transport is told to fail them with FailWith, as a test of a dispatcher
// would.
const refusedHeader = "transporttest-refused"

func TestConformance(t *testing.T) {
	mem := memory.New()
	mem.FailWith(func(m *relayer.Message) error {
		if slices.ContainsFunc(m.Headers, func(h headers.Header) bool { return h.Name == refusedHeader }) {
			return fmt.Errorf("memory conformance: message %s refused: %w", m.ID, relayer.ErrPermanent)
		}
		return nil
	})
	var seq atomic.Int64
	transporttest.Run(t, transporttest.Broker{
		Transport:   mem,
		CarriesKey:  true,
		Destination: func(t *testing.T) string { return fmt.Sprintf("dest-%d", seq.Add(1)) },
		Received: func(t *testing.T, destination string, n int) []relayer.Message {
			t.Helper()
			testkit.Eventually(t, 5*time.Second, func() bool { return len(mem.Messages(destination)) >= n }, "%d messages at %s", n, destination)
			return mem.Messages(destination)
		},
		// The memory transport records whatever a test's dispatcher sends,
		// whatever capabilities it was told to report.
		OverMaxBatch: transporttest.DeliversOverMaxBatch,
		Unsendable: func(t *testing.T, msg *relayer.Message) {
			msg.Headers = append(msg.Headers, headers.Header{Name: refusedHeader})
		},
		// Unreachable stays nil: an in-process transport has no broker to
		// lose; tests make it fail with FailWith.
	})
}
