package dispatch_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/store"
)

// deadLetter is a dead-letter row as stored.
type deadLetter struct {
	id       uuid.UUID
	typ      string
	body     []byte
	headers  []byte
	attempts int
	lastErr  string
	reason   string
}

func (b *bundle) deadLetters(t *testing.T) []deadLetter {
	t.Helper()
	rs, err := b.db.Query(`SELECT id, message_type, body, headers, attempts, coalesce(last_error, ''), reason
		FROM "` + b.schema + `".ob_dead ORDER BY id`)
	must(t, err)
	defer rs.Close()
	var out []deadLetter
	for rs.Next() {
		var d deadLetter
		must(t, rs.Scan(&d.id, &d.typ, &d.body, &d.headers, &d.attempts, &d.lastErr, &d.reason))
		out = append(out, d)
	}
	must(t, rs.Err())
	return out
}

// withRetry returns b's outbox whose routes carry the given retry policies
// (Placed, Billed, Shipped), and outbox-wide policy def.
func (b *bundle) withRetry(t *testing.T, def, placed, billed, shipped relayer.Retry) relayer.Outbox {
	t.Helper()
	var routes relayer.Routes
	must(t, relayer.AddType[Placed](&routes, relayer.Route{Transport: "mem", Destination: "orders.placed", Retry: placed}))
	must(t, relayer.AddType[Billed](&routes, relayer.Route{Transport: "mem", Destination: "billing", Retry: billed}))
	must(t, relayer.AddType[Shipped](&routes, relayer.Route{Transport: "mem", Destination: "orders.shipped", Ordered: true, Retry: shipped}))
	outbox := b.outbox
	outbox.Routes = &routes
	outbox.Retry = def
	return outbox
}

// A message the transport refuses for good (relayer.ErrPermanent) moves to
// the dead letters at once, in the take that tried it, with its content,
// attempts, error and reason; the messages sent with it are delivered.
func TestPermanentFailureMovesTheMessageToTheDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	b.start(t)
	b.mem.FailWith(func(m *relayer.Message) error {
		if string(m.Body) == `{"N":2}` {
			return fmt.Errorf("message too large: %w", relayer.ErrPermanent)
		}
		return nil
	})
	ids := b.publish(t, relayer.NewOutgoing(Placed{1}), relayer.NewOutgoing(Placed{2}), relayer.NewOutgoing(Placed{3}))
	b.waitSent(t, 2)
	b.waitRows(t, 0)
	var stored []byte
	dead := b.deadLetters(t)
	if len(dead) != 1 {
		t.Fatalf("dead letters = %+v, want the refused message", dead)
	}
	d := dead[0]
	if d.id != ids[1] || d.reason != store.ReasonPermanent || d.attempts != 1 || d.lastErr != "message too large: relayer: permanent send failure" || string(d.body) != `{"N":2}` {
		t.Errorf("dead letter = %+v, want message 2, reason %q, 1 attempt, the error", d, store.ReasonPermanent)
	}
	stored = d.headers
	if len(stored) < 8 {
		t.Errorf("dead letter headers = %x, want the stored header bytes", stored)
	}
	if st := b.direct.Stats(); st.DeadLettered != 1 || st.Deleted != 2 {
		t.Errorf("stats = %+v, want 1 dead-lettered and 2 deleted", st)
	}
}

// A message that keeps failing is retried with its route's policy and moves
// to the dead letters once out of attempts; a route without a policy of its
// own follows the outbox's.
func TestExhaustedMessageMovesToTheDeadLettersPerRoutePolicy(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	b.mem.FailWith(func(*relayer.Message) error { return errors.New("broker said no") })
	ids := b.enlistOnly(t, relayer.NewOutgoing(Placed{1}), relayer.NewOutgoing(Billed{2}))
	fast := relayer.Retry{Backoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
	outbox := b.withRetry(t, relayer.Retry{MaxAttempts: 50, Backoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond},
		relayer.Retry{MaxAttempts: 3}, fast, relayer.Retry{})
	r, err := dispatch.NewRecovery(b.db, outbox, dispatch.RecoveryOptions{PollInterval: 20 * time.Millisecond, MinAge: time.Nanosecond, Logger: b.logger()})
	must(t, err)
	must(t, r.Start(context.Background()))
	defer r.Stop(context.Background())
	testkit.Eventually(t, 10*time.Second, func() bool { return len(b.deadLetters(t)) == 1 }, "the Placed message to die")
	d := b.deadLetters(t)[0]
	if d.id != ids[0] || d.reason != store.ReasonExhausted || d.attempts != 3 || d.lastErr != "broker said no" {
		t.Errorf("dead letter = %+v, want Placed after 3 attempts, reason %q", d, store.ReasonExhausted)
	}
	rows := b.rows(t)
	if len(rows) != 1 || rows[0].id != ids[1] || rows[0].attempts < 3 {
		t.Errorf("outbox = %+v, want Billed still retrying under the outbox's 50 attempts", rows)
	}
}

// Retry policies are validated up front, naming the field.
func TestRetryPolicyIsValidated(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	outbox := b.outbox
	outbox.Retry = relayer.Retry{MaxAttempts: -1}
	_, err := dispatch.NewRecovery(b.db, outbox, dispatch.RecoveryOptions{})
	if !errors.Is(err, dispatch.ErrInvalidOptions) || !errors.Is(err, relayer.ErrInvalidRetry) {
		t.Errorf("NewRecovery with MaxAttempts -1: %v, want ErrInvalidOptions and ErrInvalidRetry", err)
	}
	var routes relayer.Routes
	err = routes.Add("t", relayer.Route{Transport: "mem", Destination: "d", Retry: relayer.Retry{Backoff: time.Minute, MaxBackoff: time.Second}})
	if !errors.Is(err, relayer.ErrInvalidRoute) || !errors.Is(err, relayer.ErrInvalidRetry) {
		t.Errorf("route with MaxBackoff below Backoff: %v, want ErrInvalidRoute and ErrInvalidRetry", err)
	}
}

// An ordered head that fails for good is parked, and only its key stops: the
// other keys of its lane are delivered in order, and the parked key's later
// messages wait unsent and unparked.
func TestOrderedPermanentFailureParksOnlyItsKey(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	ka, kb, kc := twoLaneKeys(t) // kc shares ka's lane
	b.mem.FailWith(func(m *relayer.Message) error {
		if m.Key == ka && string(m.Body) == `{"N":2}` {
			return fmt.Errorf("schema rejected: %w", relayer.ErrPermanent)
		}
		return nil
	})
	b.shipped(t, []string{ka, kb, kc}, 5, 100)
	o := b.orderedWorker(t, b.db, b.mem, dispatch.OrderedOptions{LeaseDuration: 2 * time.Second, PollInterval: 30 * time.Millisecond})
	b.waitSent(t, 11)
	morePasses(t, o, 3)
	seq := sequences(t, b.mem.All())
	if fmt.Sprint(seq[ka]) != "[1]" || fmt.Sprint(seq[kb]) != "[1 2 3 4 5]" || fmt.Sprint(seq[kc]) != "[1 2 3 4 5]" {
		t.Errorf("with %s's message 2 refused for good: %v (%s shares its lane)", ka, seq, kc)
	}
	var parked, waiting, attempts int
	must(t, b.db.QueryRow(`SELECT count(*) FILTER (WHERE parked_at IS NOT NULL), count(*) FILTER (WHERE parked_at IS NULL),
		max(attempts) FROM "`+b.schema+`".ob_outbox WHERE ordering_key = $1`, ka).Scan(&parked, &waiting, &attempts))
	if parked != 1 || waiting != 3 || attempts != 1 {
		t.Errorf("%s: %d parked, %d waiting, attempts %d; want its head parked after 1 attempt and 3 rows waiting", ka, parked, waiting, attempts)
	}
	if st := o.Stats(); st.Parked != 1 {
		t.Errorf("stats = %+v, want 1 parked", st)
	}
	// Redrive: once the cause is fixed, retrying the key delivers its rows
	// in order, the parked head first.
	b.mem.FailWith(nil)
	if n, err := b.store.RetryParked(context.Background(), store.ParkedFilter{Key: ka}); err != nil || n != 1 {
		t.Fatalf("RetryParked = %d, %v", n, err)
	}
	o.Wake()
	b.waitSent(t, 15)
	b.waitRows(t, 0)
	if seq := sequences(t, b.mem.All()); fmt.Sprint(seq[ka]) != "[1 2 3 4 5]" {
		t.Errorf("after retrying the parked key: %s got %v", ka, seq[ka])
	}
}

// An ordered head that fails waits for its backoff with its key only: the
// lane's other keys flow meanwhile, and the key resumes in order.
func TestOrderedRetryBackoffHoldsOnlyItsKey(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	ka, _, kc := twoLaneKeys(t)
	var mu sync.Mutex
	failures := 0
	b.mem.FailWith(func(m *relayer.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if m.Key == ka && string(m.Body) == `{"N":2}` && failures < 2 {
			failures++
			return errors.New("try later")
		}
		return nil
	})
	b.shipped(t, []string{ka}, 5, 100)
	outbox := b.withRetry(t, relayer.Retry{Backoff: 400 * time.Millisecond}, relayer.Retry{}, relayer.Retry{}, relayer.Retry{})
	b.orderedWorkerOn(t, b.db, outbox, dispatch.OrderedOptions{LeaseDuration: 2 * time.Second, PollInterval: 20 * time.Millisecond})
	testkit.Eventually(t, 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return failures == 1 }, "the first failure")
	failedAt := time.Now()
	b.shipped(t, []string{kc}, 5, 100) // same lane, behind the waiting key's rows
	b.waitSent(t, 10)
	// The other key went by while the failing one waited: each of its
	// messages was accepted before the failing key's retried message.
	for i, m := range b.mem.All() {
		if m.Key == ka && string(m.Body) == `{"N":2}` {
			if i < 6 {
				t.Errorf("%s's retried message was accepted %dth, before %s's 5 messages went by", ka, i+1, kc)
			}
			break
		}
	}
	if time.Since(failedAt) < 2*320*time.Millisecond {
		t.Errorf("the failing key was done %s after its first failure, before two backoffs", time.Since(failedAt))
	}
	seq := sequences(t, b.mem.All())
	if fmt.Sprint(seq[ka]) != "[1 2 3 4 5]" || fmt.Sprint(seq[kc]) != "[1 2 3 4 5]" {
		t.Errorf("deliveries = %v", seq)
	}
	b.waitRows(t, 0)
}

// An ordered head out of attempts is parked like a permanent failure.
func TestOrderedExhaustedHeadIsParked(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	ka, _, _ := twoLaneKeys(t)
	b.mem.FailWith(func(m *relayer.Message) error {
		if bytes.Equal(m.Body, []byte(`{"N":1}`)) {
			return errors.New("nope")
		}
		return nil
	})
	b.shipped(t, []string{ka}, 2, 100)
	outbox := b.withRetry(t, relayer.Retry{}, relayer.Retry{}, relayer.Retry{}, relayer.Retry{MaxAttempts: 2, Backoff: time.Millisecond})
	o := b.orderedWorkerOn(t, b.db, outbox, dispatch.OrderedOptions{LeaseDuration: 2 * time.Second, PollInterval: 20 * time.Millisecond})
	testkit.Eventually(t, 10*time.Second, func() bool { return o.Stats().Parked == 1 }, "the head to be parked")
	var attempts int
	var lastErr string
	must(t, b.db.QueryRow(`SELECT attempts, last_error FROM "`+b.schema+`".ob_outbox WHERE parked_at IS NOT NULL`).Scan(&attempts, &lastErr))
	if attempts != 2 || lastErr != "nope" {
		t.Errorf("parked head: attempts %d, error %q; want 2 and the error", attempts, lastErr)
	}
	morePasses(t, o, 3)
	if n := b.mem.Len(); n != 0 {
		t.Errorf("%d messages delivered; the parked key's second message must wait", n)
	}
}

// Redrive running against every worker under load loses and duplicates
// nothing: while producers publish unordered and ordered messages and the
// broker refuses one send in ten for good, an operator loop requeues every
// dead letter and retries every parked key over and over. In the end each
// message arrived exactly once, and each key's messages in order.
func TestRedriveUnderLoadLosesAndDuplicatesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	var poison atomic.Bool
	poison.Store(true)
	b.mem.FailWith(func(*relayer.Message) error {
		if poison.Load() && rand.IntN(10) == 0 {
			return fmt.Errorf("refused: %w", relayer.ErrPermanent)
		}
		return nil
	})
	r, w := runnerFor(t, b, dispatch.RunnerOptions{DisableCleanup: true})
	must(t, r.Start(context.Background()))

	// The operator: requeue and retry everything, as fast as it can.
	ctx, cancel := context.WithCancel(context.Background())
	var redriven sync.WaitGroup
	var requeued, retried atomic.Int64
	redriven.Go(func() {
		for ctx.Err() == nil {
			n, err := b.store.RequeueDead(ctx, store.DeadFilter{})
			if err == nil {
				requeued.Add(n)
			}
			if n, err = b.store.RetryParked(ctx, store.ParkedFilter{}); err == nil {
				retried.Add(n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})

	const producers, txs, perKey = 4, 30, 30
	var produced sync.WaitGroup
	var keys []string
	for p := range producers {
		mine := []string{fmt.Sprintf("p%d-a", p), fmt.Sprintf("p%d-b", p)}
		keys = append(keys, mine...)
		produced.Go(func() {
			n := 0
			for i := range txs {
				msgs := []relayer.Outgoing{relayer.NewOutgoing(Placed{i}), relayer.NewOutgoing(Billed{i})}
				if n < perKey {
					n++
					for _, k := range mine {
						msgs = append(msgs, relayer.NewOutgoing(Shipped{n}, relayer.Key(k)))
					}
				}
				publishWith(t, b, w, msgs...)
			}
		})
	}
	produced.Wait()
	// Redrive and failures going on together.
	testkit.Eventually(t, 10*time.Second, func() bool { return requeued.Load() != 0 && retried.Load() != 0 }, "dead letters requeued and parked keys retried")
	poison.Store(false)
	total := producers * (2*txs + 2*perKey)
	b.waitSent(t, total)
	testkit.Eventually(t, 10*time.Second, func() bool {
		n, _ := b.store.CountDead(context.Background())
		return n == 0 && len(b.rows(t)) == 0
	}, "the outbox and dead letters to empty")
	cancel()
	redriven.Wait()

	seen := map[uuid.UUID]int{}
	for _, m := range b.mem.All() {
		seen[m.ID]++
	}
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	t.Logf("%d messages, %d deliveries, %d duplicates; redrive requeued %d dead letters and retried %d parked keys",
		total, b.mem.Len(), dups, requeued.Load(), retried.Load())
	if len(seen) != total || dups != 0 {
		t.Errorf("%d distinct messages delivered of %d, %d duplicates; want each once", len(seen), total, dups)
	}
	if requeued.Load() == 0 || retried.Load() == 0 {
		t.Errorf("redrive requeued %d and retried %d: the test did not exercise it", requeued.Load(), retried.Load())
	}
	checkOrder(t, b.mem.Messages("orders.shipped"), keys, perKey, false)
}

func TestLoadRetry(t *testing.T) {
	t.Parallel()
	r, err := dispatch.LoadRetry(dispatch.MapSource(map[string]string{"MaxAttempts": "4", "Backoff": "250ms"}))
	if err != nil || r != (relayer.Retry{MaxAttempts: 4, Backoff: 250 * time.Millisecond}) {
		t.Errorf("LoadRetry = %+v, %v", r, err)
	}
	for key, value := range map[string]string{"MaxAttempts": "zero", "Backoff": "1µs", "MaxBackoff": "-1s"} {
		if _, err := dispatch.LoadRetry(dispatch.MapSource(map[string]string{key: value})); !errors.Is(err, dispatch.ErrInvalidOptions) || !strings.Contains(err.Error(), key) {
			t.Errorf("LoadRetry with %s=%s: %v, want ErrInvalidOptions naming it", key, value, err)
		}
	}
}
