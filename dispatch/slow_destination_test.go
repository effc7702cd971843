package dispatch_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/internal/testkit"
)

// blockedDestination holds every send to one destination until its context
// ends, like a broker that times out; other destinations are accepted at once.
type blockedDestination struct {
	relayer.Transport
	destination string
	delivered   atomic.Int64
}

func (b *blockedDestination) Send(ctx context.Context, m *relayer.Message) error {
	return b.SendBatch(ctx, []*relayer.Message{m})
}

func (b *blockedDestination) SendBatch(ctx context.Context, ms []*relayer.Message) error {
	if ms[0].Destination == b.destination {
		<-ctx.Done()
		return ctx.Err()
	}
	b.delivered.Add(int64(len(ms)))
	return nil
}

// A destination that times out holds up only its own rows: recovery delivers
// every other destination's rows of the same takes at once.
func TestRecoverySlowDestinationDoesNotStarveTheOthers(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	var msgs []relayer.Outgoing
	for i := range 10000 {
		if i%100 == 0 {
			msgs = append(msgs, relayer.NewOutgoing(Billed{i})) // 1%: the blocked destination, first in every group order
		} else {
			msgs = append(msgs, relayer.NewOutgoing(Placed{i}))
		}
	}
	for start := 0; start < len(msgs); start += 1000 {
		b.enlistOnly(t, msgs[start:start+1000]...)
	}
	tr := &blockedDestination{Transport: b.mem, destination: "billing"}
	outbox := b.outbox
	outbox.Transports = map[string]relayer.Transport{"mem": tr}
	r, err := dispatch.NewRecovery(b.db, outbox, dispatch.RecoveryOptions{ClaimDuration: 20 * time.Second, MinAge: time.Millisecond, PollInterval: 50 * time.Millisecond, Logger: b.logger()})
	must(t, err)
	start := time.Now()
	must(t, r.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		r.Stop(ctx) // the blocked sends end with the cancellation
	})
	testkit.Eventually(t, 8*time.Second, func() bool { return tr.delivered.Load() >= 9900 }, "recovery to deliver the 9,900 rows of healthy destinations")
	t.Logf("9,900 healthy rows delivered in %s beside a destination that times out", time.Since(start).Round(time.Millisecond))
}

// After a send to a destination times out, direct dispatch passes over that
// destination for a while, leaving its rows in the table, and keeps sending
// the others at once.
func TestDirectSetsASlowDestinationAside(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	tr := &blockedDestination{Transport: b.mem, destination: "billing"}
	outbox := b.outbox
	outbox.Transports = map[string]relayer.Transport{"mem": tr}
	d, err := dispatch.NewDirect(b.db, outbox, dispatch.DirectOptions{ClaimDuration: 500 * time.Millisecond, Logger: b.logger()})
	must(t, err)
	must(t, d.Start(context.Background()))
	t.Cleanup(func() { d.Stop(context.Background()) })
	publish := func(msgs ...relayer.Outgoing) {
		must(t, enlistWith(t, b, d, msgs...))
	}
	publish(relayer.NewOutgoing(Billed{0}))
	testkit.Eventually(t, 10*time.Second, func() bool { return len(d.Paused()) != 0 }, "the destination set aside after its send timed out")
	start := time.Now()
	for i := 1; i <= 20; i++ {
		publish(relayer.NewOutgoing(Billed{i}), relayer.NewOutgoing(Placed{i}))
	}
	testkit.Eventually(t, 5*time.Second, func() bool { return tr.delivered.Load() >= 20 }, "direct dispatch to deliver 20 healthy messages")
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("20 healthy messages took %s beside a slow destination; each slow send costs 500ms when it is not set aside", took)
	}
	if left := d.Stats().LeftForRecovery; left != 20 {
		t.Errorf("LeftForRecovery = %d, want the 20 rows of the set-aside destination", left)
	}
}

// A row stamped by a writer whose clock runs ten minutes ahead is recovered
// like any other: its age is judged on the database's clock.
func TestRecoveryTakesRowsOfAWriterAhead(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	ahead := time.Now().Add(10 * time.Minute).UTC().Truncate(time.Microsecond)
	m := relayer.Message{ID: uuid.Must(relayer.NewID()), Type: "placed", Transport: "mem", Destination: "orders.placed", Body: []byte(`{}`), CreatedAt: ahead}
	must(t, b.store.Insert(context.Background(), []relayer.Message{m}))
	r := b.recovery(t, dispatch.RecoveryOptions{PollInterval: 50 * time.Millisecond})
	must(t, r.Start(context.Background()))
	b.waitSent(t, 1)
}

// enlistWith publishes msgs in one transaction through a writer that notifies d.
func enlistWith(t *testing.T, b *bundle, d *dispatch.Direct, msgs ...relayer.Outgoing) error {
	t.Helper()
	w, err := enlist.NewWriter(b.outbox, enlist.Options{Listener: d, Logger: b.logger()})
	if err != nil {
		return err
	}
	return w.RunInTx(context.Background(), b.db, nil, func(tx *enlist.Tx) error {
		return tx.PublishAll(context.Background(), msgs...)
	})
}

// outage fails every send with relayer.ErrUnavailable while down is set, and
// counts the messages it was handed meanwhile: each is a row taken and
// written back.
type outage struct {
	relayer.Transport
	down    atomic.Bool
	refused atomic.Int64
}

func (o *outage) Send(ctx context.Context, m *relayer.Message) error {
	return o.SendBatch(ctx, []*relayer.Message{m})
}

func (o *outage) SendBatch(ctx context.Context, ms []*relayer.Message) error {
	if o.down.Load() {
		o.refused.Add(int64(len(ms)))
		return fmt.Errorf("broker down: %w", relayer.ErrUnavailable)
	}
	return o.Transport.SendBatch(ctx, ms)
}

// While a destination is unavailable, recovery and the ordered workers set it
// aside instead of taking and writing back its rows at every poll, and spend
// no attempts; once it is back, everything is delivered once.
func TestUnavailableDestinationIsSetAsideWithoutSpendingAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	var msgs []relayer.Outgoing
	for i := range 400 {
		msgs = append(msgs, relayer.NewOutgoing(Placed{i}))
	}
	b.enlistOnly(t, msgs...)
	b.shipped(t, keyList(20), 20, 400)
	tr := &outage{Transport: b.mem}
	tr.down.Store(true)
	outbox := b.outbox
	outbox.Transports = map[string]relayer.Transport{"mem": tr}
	r, err := dispatch.NewRunner(b.db, outbox, dispatch.RunnerOptions{DisableCleanup: true, Logger: b.logger(),
		Recovery: dispatch.RecoveryOptions{PollInterval: 20 * time.Millisecond, MinAge: time.Millisecond},
		Ordered:  dispatch.OrderedOptions{PollInterval: 20 * time.Millisecond}})
	must(t, err)
	var startXID int64
	must(t, b.db.QueryRow(`SELECT txid_current()`).Scan(&startXID))
	must(t, r.Start(context.Background()))
	defer r.Stop(context.Background())
	// An absence over an outage's length (75 polls of each worker): no row
	// rewritten, no attempt spent.
	time.Sleep(1500 * time.Millisecond)
	refused := tr.refused.Load()
	var rewritten int
	must(t, b.db.QueryRow(`SELECT count(*) FROM "`+b.schema+`".ob_outbox WHERE xmin::text::bigint > $1`, startXID).Scan(&rewritten))
	t.Logf("rows rewritten during the outage: %d", rewritten)
	if rewritten > 20 {
		t.Errorf("%d rows were rewritten during the outage, want at most a handful", rewritten)
	}
	var attempts int
	must(t, b.db.QueryRow(`SELECT coalesce(max(attempts), 0) FROM "`+b.schema+`".ob_outbox`).Scan(&attempts))
	t.Logf("outage of 1.5s: %d messages handed to the transport and refused (backlog 800)", refused)
	if attempts != 0 {
		t.Errorf("rows spent up to %d attempts during the outage, want none", attempts)
	}
	// The unordered backlog's first chunk is refused, then one probe send at
	// a time tests each destination.
	if refused > 400+20 {
		t.Errorf("%d messages were taken and refused in 1.5s: the destination was not set aside", refused)
	}
	// The pause is visible in process and, published, to any operator.
	paused := r.Paused()
	if len(paused) != 2 || paused[0].Destination != "orders.placed" || !strings.Contains(paused[0].LastError, "broker down") || paused[0].Since.IsZero() {
		t.Errorf("Runner.Paused() = %+v, want orders.placed and orders.shipped paused with the error", paused)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		pub, err := b.store.Pauses(context.Background())
		must(t, err)
		return len(pub) == 2 && pub[1].Destination == "orders.shipped" && strings.Contains(pub[1].LastError, "broker down")
	}, "the pauses to be published")
	tr.down.Store(false)
	back := time.Now()
	b.waitSent(t, 800)
	b.waitRows(t, 0)
	t.Logf("delivered 800 messages %s after the destination came back", time.Since(back).Round(time.Millisecond))
	checkOrder(t, b.mem.Messages("orders.shipped"), keyList(20), 20, true)
	if p := r.Paused(); len(p) != 0 {
		t.Errorf("still paused after the destination came back: %+v", p)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		pub, err := b.store.Pauses(context.Background())
		must(t, err)
		return len(pub) == 0
	}, "the published pauses to be cleared")
	if n := b.mem.Len(); n != 800 {
		t.Errorf("delivered %d messages, want each of the 800 once", n)
	}
}

// A take whose only destination is slow (past a sixth of the claim, within
// the claim) waits for it: a straggler is ended only to free the rows of
// the take's other destinations, so a slow but working broker is not made
// to receive its batches twice.
func TestRecoveryWaitsForASlowDestinationAlone(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	var msgs []relayer.Outgoing
	for i := range 300 {
		msgs = append(msgs, relayer.NewOutgoing(Placed{i}))
	}
	b.enlistOnly(t, msgs...)
	b.mem.SetDelay(400 * time.Millisecond)
	r := b.recovery(t, dispatch.RecoveryOptions{ClaimDuration: 1200 * time.Millisecond, MinAge: time.Millisecond, PollInterval: 50 * time.Millisecond, Workers: 1})
	must(t, r.Start(context.Background()))
	b.waitRows(t, 0)
	if n, sends := b.mem.Len(), b.mem.Sends(); n != 300 || sends != 1 {
		t.Errorf("%d messages in %d sends, want the 300 once, in one batch", n, sends)
	}
}
