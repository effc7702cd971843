package dispatch_test

import (
	"testing"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
)

// A caller may reuse its header buffer once Publish returned: the broker gets
// the bytes as they were at publish.
func TestCallerMayReuseHeaderBuffers(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	release := b.mem.Block(false)
	b.start(t)
	buf := []byte("tenant-A")
	b.publish(t, relayer.NewOutgoing(Placed{1}, relayer.Header("tenant", buf)))
	copy(buf, "tenant-B")
	release()
	b.waitSent(t, 1)
	for _, h := range b.mem.All()[0].Headers {
		if h.Name == "tenant" && string(h.Value) != "tenant-A" {
			t.Fatalf("the broker got tenant=%q, want the published tenant-A", h.Value)
		}
	}
}
