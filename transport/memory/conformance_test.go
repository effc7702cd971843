package memory_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/transport/memory"
	"github.com/relayer-go/relayer/transport/transporttest"
)

func TestConformance(t *testing.T) {
	mem := memory.New()
	var seq atomic.Int64
	transporttest.Run(t, transporttest.Broker{
		Transport:   mem,
		CarriesKey:  true,
		Destination: func(t *testing.T) string { return fmt.Sprintf("dest-%d", seq.Add(1)) },
		Received: func(t *testing.T, destination string, n int) []relayer.Message {
			t.Helper()
			deadline := time.Now().Add(5 * time.Second)
			for {
				got := mem.Messages(destination)
				if len(got) >= n || time.Now().After(deadline) {
					if len(got) < n {
						t.Fatalf("%d of %d messages arrived at %s", len(got), n, destination)
					}
					return got
				}
				time.Sleep(5 * time.Millisecond)
			}
		},
	})
}
