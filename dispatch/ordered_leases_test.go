package dispatch_test

import (
	"testing"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/internal/workerstore"
)

// TestOrderedLocksLeasesItRenewedAMomentAgo checks that batches following one
// another on a lane whose lease was renewed a moment ago lock the lease row
// instead of writing a new version of it each, and that a lane whose lease
// was released meanwhile (by an operator) goes again at once, taking the
// lease anew, rather than waiting for the next poll.
func TestOrderedLocksLeasesItRenewedAMomentAgo(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	key, _, _ := twoLaneKeys(t)
	lane, err := relayer.Lane(key, relayer.LanesDefault)
	must(t, err)
	o := b.orderedWorker(t, b.db, b.mem, dispatch.OrderedOptions{LeaseDuration: 30 * time.Second, PollInterval: 5 * time.Second})
	leases := `"` + b.schema + `".ob_relayer_leases`
	version := func() string {
		t.Helper()
		var xmin string
		must(t, b.db.QueryRow(`SELECT xmin::text FROM `+leases+` WHERE name = $1`, workerstore.LaneLeaseName(lane)).Scan(&xmin))
		return xmin
	}
	send := func(n int) time.Duration {
		t.Helper()
		start := time.Now()
		b.enlistOnly(t, relayer.NewOutgoing(Shipped{n}, relayer.Key(key)))
		o.Wake()
		b.waitSent(t, n)
		took := time.Since(start)
		b.waitRows(t, 0) // the batch committed, and its lease with it
		return took
	}
	send(1)
	renewed := version()
	for n := 2; n <= 6; n++ {
		send(n)
	}
	if v := version(); v != renewed {
		t.Errorf("the lane's lease row was written again (version %s, then %s) by batches right after its renewal", renewed, v)
	}
	_, err = b.db.Exec(`DELETE FROM `+leases+` WHERE name = $1`, workerstore.LaneLeaseName(lane))
	must(t, err)
	// At once: in milliseconds, where a batch that gave up would leave the
	// lane to a later scan (a second or more).
	if took := send(7); took >= 500*time.Millisecond {
		t.Errorf("a message on a lane whose lease was released took %s, as if it waited for a later scan", took)
	}
	if v := version(); v == renewed {
		t.Error("the released lease was not taken anew")
	}
	checkOrder(t, b.mem.All(), []string{key}, 7, false)
}
