package dispatch

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/transport/memory"
)

func TestCapCacheEvictsOldestInsertedAndNeverCachesFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := memory.New()
	c := newCapCache(3)
	e := func(d string) endpoint { return endpoint{"mem", d} }
	for _, d := range []string{"a", "b", "c"} {
		if _, err := c.get(ctx, e(d), mem); err != nil {
			t.Fatal(err)
		}
	}
	c.get(ctx, e("a"), mem) // a hit: does not refresh a
	if mem.CapabilityLookups() != 3 {
		t.Fatalf("%d lookups, want 3 (the hit is served from the cache)", mem.CapabilityLookups())
	}
	c.get(ctx, e("d"), mem) // evicts a, the oldest inserted
	if c.has(e("a")) || !c.has(e("b")) || !c.has(e("d")) || c.len() != 3 {
		t.Errorf("after inserting d: a %v b %v d %v len %d; want a evicted", c.has(e("a")), c.has(e("b")), c.has(e("d")), c.len())
	}
	c.get(ctx, e("a"), mem) // looked up again, evicts b
	if mem.CapabilityLookups() != 5 || c.has(e("b")) {
		t.Errorf("evicted destination not looked up again: %d lookups", mem.CapabilityLookups())
	}

	mem.SetCapabilitiesError("bad", errors.New("down"))
	mem.SetCapabilities("zero", relayer.Capabilities{MaxBatchSize: 0})
	for range 2 {
		if _, err := c.get(ctx, e("bad"), mem); err == nil {
			t.Error("failed lookup returned no error")
		}
		if _, err := c.get(ctx, e("zero"), mem); err == nil {
			t.Error("nonpositive MaxBatchSize returned no error")
		}
	}
	if mem.CapabilityLookups() != 9 || c.has(e("bad")) || c.has(e("zero")) {
		t.Errorf("failures were cached: %d lookups", mem.CapabilityLookups())
	}

	big := newCapCache(capabilityCacheSize)
	for i := range capabilityCacheSize + 10 {
		big.get(ctx, e(fmt.Sprint(i)), mem)
	}
	if big.len() != capabilityCacheSize || big.has(e("9")) || !big.has(e("10")) {
		t.Errorf("cache of %d holds %d entries", capabilityCacheSize, big.len())
	}
}

func TestLastOfEachIDKeepsTheCommittedCopy(t *testing.T) {
	t.Parallel()
	a, b := uuid.New(), uuid.New()
	rows := []relayer.Message{{ID: a, Type: "rolled back"}, {ID: b, Type: "b"}, {ID: a, Type: "committed"}}
	var seen map[uuid.UUID]int
	got := lastOfEachID(rows, &seen)
	if len(got) != 2 || got[0].ID != b || got[1].ID != a || got[1].Type != "committed" {
		t.Errorf("lastOfEachID = %+v, want b, then a's last copy", got)
	}
	unique := []relayer.Message{{ID: a}, {ID: b}}
	if got := lastOfEachID(unique, &seen); len(got) != 2 || got[0].ID != a || got[1].ID != b {
		t.Errorf("lastOfEachID of unique rows = %+v", got)
	}
}
