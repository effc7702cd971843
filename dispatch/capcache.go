package dispatch

import (
	"context"
	"fmt"
	"sync"

	"github.com/relayer-go/relayer"
)

// capabilityCacheSize is how many (transport, destination) capability lookups a
// dispatcher keeps (its workers share them).
const capabilityCacheSize = 256

type endpoint struct {
	transport   string
	destination string
}

// capCache keeps successful capability lookups, evicting the oldest inserted
// entry when full; hits do not change the eviction order, and failures are
// never kept, so a failing destination is asked again next time. It is safe
// for concurrent use; workers that miss the same endpoint at once may each ask
// the transport.
type capCache struct {
	mu      sync.Mutex
	entries map[endpoint]relayer.Capabilities
	order   []endpoint // insertion order, oldest first; a ring of len size
	next    int        // where the next insertion goes once full
	size    int
}

func newCapCache(size int) *capCache {
	return &capCache{entries: make(map[endpoint]relayer.Capabilities, size), size: size}
}

// get returns the capabilities of e, asking tr on a miss. A lookup error or a
// nonpositive MaxBatchSize is returned as an error and not cached.
func (c *capCache) get(ctx context.Context, e endpoint, tr relayer.Transport) (relayer.Capabilities, error) {
	return c.getChecked(ctx, e, tr, nil)
}

// getChecked is get with an extra requirement: capabilities that check
// rejects are returned as its error and not cached, so that a destination can
// become acceptable later without a restart.
func (c *capCache) getChecked(ctx context.Context, e endpoint, tr relayer.Transport, check func(relayer.Capabilities) error) (relayer.Capabilities, error) {
	c.mu.Lock()
	caps, ok := c.entries[e]
	c.mu.Unlock()
	if ok {
		return caps, nil
	}
	// The lookup runs without the lock: a slow broker must not hold up
	// workers whose endpoints are cached.
	caps, err := tr.Capabilities(ctx, e.destination)
	if err != nil {
		return relayer.Capabilities{}, fmt.Errorf("capabilities of %s/%s: %w", e.transport, e.destination, err)
	}
	if caps.MaxBatchSize <= 0 {
		return relayer.Capabilities{}, fmt.Errorf("capabilities of %s/%s: MaxBatchSize %d is not positive", e.transport, e.destination, caps.MaxBatchSize)
	}
	if check != nil {
		if err := check(caps); err != nil {
			return relayer.Capabilities{}, fmt.Errorf("capabilities of %s/%s: %w", e.transport, e.destination, err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[e]; !ok { // another worker may have put it meanwhile
		c.put(e, caps)
	}
	return caps, nil
}

func (c *capCache) put(e endpoint, caps relayer.Capabilities) {
	if len(c.order) < c.size {
		c.order = append(c.order, e)
	} else {
		delete(c.entries, c.order[c.next])
		c.order[c.next] = e
		c.next = (c.next + 1) % c.size
	}
	c.entries[e] = caps
}

func (c *capCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

func (c *capCache) has(e endpoint) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.entries[e]
	return ok
}
