package faults

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/headers"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/tool/pgcluster"
	"github.com/relayer-go/relayer/store"
)

var quietLogger = slog.New(slog.DiscardHandler)

// scenario is one run of the system under a fault.
type scenario struct {
	name     string
	injected string // what the fault is, for the report
	workers  int
	// setup runs before the workers start.
	setup func(t *testing.T, s *system)
	// inject runs while the producers do, until stop closes, and reports
	// what it did.
	inject func(ctx context.Context, s *system, stop <-chan struct{}) injection
	// overlaps reports whether two sends of one lane may overlap: after a
	// worker's session is killed, its send may still be going on while the
	// lane's next owner sends, and that is not a second owner while the
	// first's transaction holds the lane row.
	overlaps bool
	// dupsPerFault bounds duplicates per fault injected (what a worker had
	// sent and not committed when the fault cut its sessions off), from the
	// bounds the workers' options give (dispatch.InFlight). Nil means none
	// allowed.
	dupsPerFault func(l dispatch.InFlight, sc scenario) int
	// dupCause is the documented cause of the duplicates it may have.
	dupCause string
	// leftRows and leftDead are the outbox rows and dead letters the
	// scenario leaves on purpose; deadReasons, when set, the dead letters
	// by reason (default: leftDead corrupt ones).
	leftRows, leftDead int64
	deadReasons        map[string]int64
	// check, when set, checks what is particular to the scenario.
	check func(t *testing.T, s *system)
	// ownCluster runs the scenario on a PostgreSQL cluster of its own,
	// which inject may restart.
	ownCluster bool
	// proxied puts a proxy between each worker and the server.
	proxied bool
	// maxDrained, when set, bounds how long delivery may take to finish
	// after the producers stopped.
	maxDrained time.Duration
}

// injection is what an injector did.
type injection struct {
	faults int           // how many faults it injected
	note   string        // in words, for the report
	resume time.Duration // from the end of the fault to the next delivery, when it applies
}

// reportRow is one line of the report.
type reportRow struct {
	scenario, injected string
	v                  verdict
	dupCause           string
	faults, perFault   int // the duplicates' bound: faults × perFault
	resume, drained    time.Duration
	before, after      baseline
}

var (
	reportMu   sync.Mutex
	reportRows []reportRow
)

func TestFaults(t *testing.T) {
	reportMu.Lock()
	reportRows = nil // this run's rows only, under -count
	reportMu.Unlock()
	for _, sc := range scenarios() {
		// Goroutines and heap are measured around the whole subtest, so
		// that what its cleanups close (pools, proxies, a cluster) is gone.
		base := measure()
		if !t.Run(sc.name, func(t *testing.T) { runScenario(t, sc) }) {
			continue
		}
		after := checkBaseline(t, sc.name, base)
		reportMu.Lock()
		if n := len(reportRows); n > 0 && reportRows[n-1].scenario == sc.name {
			reportRows[n-1].before, reportRows[n-1].after = base, after
		}
		reportMu.Unlock()
	}
	if *report != "" {
		writeReport(t, *report)
	}
}

func scenarios() []scenario {
	kill := func(every time.Duration) func(ctx context.Context, s *system, stop <-chan struct{}) injection {
		return func(ctx context.Context, s *system, stop <-chan struct{}) injection {
			var in injection
			rounds := 0
			for {
				select {
				case <-stop:
					in.note = fmt.Sprintf("%d worker sessions killed in %d rounds", in.faults, rounds)
					return in
				case <-time.After(every/2 + rand.N(every)):
				}
				n, err := s.killSessions(ctx, "worker-")
				if err == nil && n > 0 {
					rounds++
					in.faults += n // each session may have been mid-batch
				}
			}
		}
	}
	outage := func(ctx context.Context, s *system, stop <-chan struct{}) injection {
		d := produceFor() / 2
		time.Sleep(produceFor() / 4)
		s.broker.down.Store(true)
		time.Sleep(d)
		before := s.broker.count()
		s.broker.down.Store(false)
		back := time.Now()
		for s.broker.count() == before && time.Since(back) < time.Minute {
			time.Sleep(time.Millisecond)
		}
		<-stop
		return injection{faults: 1, note: fmt.Sprintf("every send refused (unavailable) for %s", d.Round(time.Millisecond)), resume: time.Since(back)}
	}
	flaky := func(ctx context.Context, s *system, stop <-chan struct{}) injection {
		s.broker.flaky.Store(true)
		<-stop
		s.broker.flaky.Store(false)
		return injection{note: fmt.Sprintf("%d of %d sends failed, %d slowed by %s", s.broker.failed.Load(), s.broker.sends.Load(), s.broker.slowed.Load(), s.broker.slowFor)}
	}
	churn := func(ctx context.Context, s *system, stop <-chan struct{}) injection {
		var in injection
		for {
			select {
			case <-stop:
				in.note = fmt.Sprintf("%d workers stopped and started", in.faults)
				return in
			case <-time.After(400*time.Millisecond + rand.N(400*time.Millisecond)):
			}
			var live []*worker
			s.workers.Range(func(_, v any) bool { live = append(live, v.(*worker)); return true })
			if len(live) > 1 {
				s.stopWorker(live[rand.IntN(len(live))])
				in.faults++
			}
			if len(live) <= 3 {
				s.startWorker(ctx)
			}
		}
	}
	freeze := func(ctx context.Context, s *system, stop <-chan struct{}) injection {
		time.Sleep(produceFor() / 4)
		s.broker.freeze.Store(true)
		for frozen, _ := s.broker.frozenSend(); !frozen; frozen, _ = s.broker.frozenSend() {
			select {
			case <-stop:
				s.broker.freeze.Store(false)
				s.broker.thawAll()
				return injection{note: "no ordered send to freeze"}
			case <-time.After(5 * time.Millisecond):
			}
		}
		// Frozen past its transaction's life and its leases, until
		// another worker sends the lane (a minute at most).
		_, at := s.broker.frozenSend()
		time.Sleep(frozenTxLife + 2*leaseDuration)
		for len(s.broker.otherSendsOfFrozenLane()) == 0 && time.Since(at) < time.Minute {
			time.Sleep(10 * time.Millisecond)
		}
		in := injection{faults: 1}
		if starts := s.broker.otherSendsOfFrozenLane(); len(starts) > 0 {
			in.resume = starts[0].Sub(at)
		}
		d := time.Since(at)
		s.broker.thawAll()
		<-stop
		in.note = fmt.Sprintf("frozen for %s, its lane sent by another worker %s after the freeze, then its send completed",
			d.Round(time.Millisecond), in.resume.Round(time.Millisecond))
		return in
	}
	restart := func(ctx context.Context, s *system, stop <-chan struct{}) injection {
		var in injection
		var resumes []string
		for _, immediate := range []bool{false, true} {
			time.Sleep(produceFor() / 3)
			if err := s.cluster.Restart(ctx, immediate); err != nil {
				s.t.Errorf("restart: %v", err)
				continue
			}
			in.faults++
			before, back := s.broker.count(), time.Now()
			for s.broker.count() == before && time.Since(back) < time.Minute {
				time.Sleep(time.Millisecond)
			}
			in.resume = max(in.resume, time.Since(back))
			mode := "fast"
			if immediate {
				mode = "immediate"
			}
			resumes = append(resumes, fmt.Sprintf("%s: delivering again %s after the server was back", mode, time.Since(back).Round(time.Millisecond)))
		}
		<-stop
		in.note = strings.Join(resumes, "; ")
		return in
	}
	loseCommits := func(ctx context.Context, s *system, stop <-chan struct{}) injection {
		for {
			select {
			case <-stop:
				lost := 0
				for _, w := range s.live() {
					lost += int(w.proxy.lost.Load())
				}
				return injection{faults: lost, note: fmt.Sprintf("%d commit replies lost", lost)}
			case <-time.After(200*time.Millisecond + rand.N(400*time.Millisecond)):
			}
			if ws := s.live(); len(ws) > 0 {
				ws[rand.IntN(len(ws))].proxy.cut.Store(1)
			}
		}
	}
	abandon := func(ctx context.Context, s *system, stop <-chan struct{}) injection {
		time.Sleep(produceFor() / 4)
		ws := s.live()
		w := ws[rand.IntN(len(ws))]
		lanes := w.runner.Lanes()
		s.relay.set(nil, w.runner) // its process would take no commits either
		w.proxy.freeze()
		at := time.Now()
		for len(lanes) > 0 && !s.broker.laneDeliveredAfter(lanes, at, w) && time.Since(at) < time.Minute {
			time.Sleep(5 * time.Millisecond)
		}
		resume := time.Since(at)
		time.Sleep(max(0, 3*leaseDuration-resume))
		w.proxy.thaw() // its late commits must change nothing
		<-stop
		return injection{faults: 1, resume: resume,
			note: fmt.Sprintf("its %d lanes sent by the others %s after it froze", len(lanes), resume.Round(time.Millisecond))}
	}
	redrive := func(ctx context.Context, s *system, stop <-chan struct{}) injection {
		var in injection
		var released int64
		for {
			select {
			case <-stop:
				in.note = fmt.Sprintf("every parked key retried %d times (%d rows released) while the broker kept refusing them", in.faults, released)
				return in
			case <-time.After(300*time.Millisecond + rand.N(300*time.Millisecond)):
			}
			if err := s.harness(ctx, func(ctx context.Context) error {
				n, err := s.st.RetryParked(ctx, store.ParkedFilter{})
				released += n
				return err
			}); err != nil {
				s.t.Errorf("retry parked: %v", err)
			}
			in.faults++
		}
	}
	cancelChurn := func(ctx context.Context, s *system, stop <-chan struct{}) injection {
		var in injection
		for {
			select {
			case <-stop:
				in.note = fmt.Sprintf("%d workers stopped by cancelling their context, mid-take", in.faults)
				return in
			case <-time.After(500*time.Millisecond + rand.N(500*time.Millisecond)):
			}
			if ws := s.live(); len(ws) > 0 {
				s.cancelWorker(ws[rand.IntN(len(ws))])
				in.faults++
			}
			s.startWorker(ctx)
		}
	}
	return []scenario{
		{name: "producer rollbacks", workers: 2, injected: "8% of transactions rolled back after publishing, 7% with a savepoint rolled back, 5% cancelled as the commit goes out"},
		{name: "sessions killed", workers: 2, injected: "pg_terminate_backend of every worker session every 0.4–1.2 s, mid-batch",
			inject: kill(800 * time.Millisecond), overlaps: true, dupsPerFault: perSession,
			dupCause: "a batch the broker took, then its worker's session killed before the commit: the rows stayed and were sent again"},
		{name: "broker outage", workers: 2, injected: "every send fails with ErrUnavailable for half the run", inject: outage},
		{name: "flaky broker", workers: 2, injected: "5% of sends fail, 1% take 700 ms", inject: flaky},
		{name: "membership churn", workers: 2, injected: "a worker stopped and another started every 0.4–0.8 s", inject: churn},
		{name: "worker frozen in a send", workers: 2, injected: "a worker frozen (its sessions through a TCP proxy too) in an ordered send past its leases, then resumed: the send completes",
			inject: freeze, proxied: true, overlaps: true, dupsPerFault: perSession, check: checkFrozenLane,
			dupCause: "the frozen send completed after the lane's next owner had sent its rows"},
		{name: "commit replies lost", workers: 2, injected: "the reply to a take's COMMIT cut by a TCP proxy (the server committed; the worker sees its connection drop)",
			inject: loseCommits, proxied: true, overlaps: true}, // the commits took effect: nothing is sent twice
		{name: "worker abandoned", workers: 2, injected: "a worker's connections frozen open by a TCP proxy past its leases, then thawed",
			inject: abandon, proxied: true, dupsPerFault: perProcess,
			dupCause: "batches the abandoned worker had sent but not committed, sent again by the others (its 16 lanes' rows in flight: on a loaded machine each batch carries more of them)"},
		{name: "server restarted", workers: 2, injected: "PostgreSQL restarted with a fast, then an immediate shutdown, while producers and workers run",
			inject: restart, ownCluster: true, overlaps: true, dupsPerFault: everyProcess,
			dupCause: "batches sent whose commit the restart cut: their rows were sent again"},
		{name: "corrupt and unroutable rows", workers: 2, injected: "3 rows with corrupt headers and 2 naming an unknown transport written straight into the table",
			setup: insertBadRows, leftRows: 2, leftDead: 3},
		{name: "bad ordered rows", workers: 2, injected: "2 ordered rows with corrupt headers, each with a good row of its key behind it, and an ordered row with a 3,000-byte key that the broker refuses, written straight into the table",
			setup: insertBadOrderedRows, leftRows: 4, leftDead: 1, deadReasons: map[string]int64{"over_limit": 1}, check: checkBadOrderedRows},
		{name: "redrive of refused keys", workers: 2, injected: "4 keys whose every send the broker refuses, their parked heads retried every 0.3–0.6 s",
			setup: poisonKeys, inject: redrive, leftRows: 12, maxDrained: 10 * time.Second},
		{name: "stopped by cancellation", workers: 2, injected: "a 20,000-row backlog sent 20 ms per batch of 100 unordered messages, workers stopped by cancelling their context every 0.5–1 s and others started",
			setup: backlog, inject: cancelChurn},
		{name: "worker processes killed and frozen", workers: 0, injected: "3 workers in processes of their own; every 1–2 s one is killed with SIGKILL (and another started) or frozen with SIGSTOP for 3–8 s, then resumed",
			setup: startProcesses(3), inject: processFaults, dupsPerFault: perProcess,
			dupCause: "batches the broker took from a process killed or frozen before its commit: the rows were sent again"},
		{name: "combined", workers: 3, injected: "sessions killed, a flaky broker, membership churn and bad rows at once",
			setup: insertBadRows, leftRows: 2, leftDead: 3, overlaps: true, dupsPerFault: perSession,
			dupCause: "a batch the broker took, then its worker's session killed before the commit: the rows stayed and were sent again",
			inject: func(ctx context.Context, s *system, stop <-chan struct{}) injection {
				var wg sync.WaitGroup
				var ins [3]injection
				for i, f := range []func(context.Context, *system, <-chan struct{}) injection{kill(time.Second), flaky, churn} {
					wg.Go(func() { ins[i] = f(ctx, s, stop) })
				}
				wg.Wait()
				return injection{faults: ins[0].faults + ins[2].faults, note: ins[0].note + "; " + ins[1].note + "; " + ins[2].note}
			}},
	}
}

// What one fault can send again: what one session had in flight (a killed
// session, a send frozen past its batch), what one worker had (a process
// killed or frozen, a worker cut off), or what every worker had (a server
// restart).
func perSession(l dispatch.InFlight, _ scenario) int    { return l.PerSession }
func perProcess(l dispatch.InFlight, _ scenario) int    { return l.Total }
func everyProcess(l dispatch.InFlight, sc scenario) int { return l.Total * sc.workers }

// startCluster starts a PostgreSQL cluster for one scenario, with a schema
// "faults".
func startCluster(t *testing.T) *pgcluster.Cluster {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Options{Install: true})
	if err != nil {
		t.Fatalf("a cluster of its own: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	db, err := sql.Open("pgx", c.URL())
	must(t, err)
	defer db.Close()
	_, err = db.Exec(`CREATE SCHEMA faults`)
	must(t, err)
	return c
}

// frozenTxLife is how long the frozen worker's transaction, idle from the
// server's side, lives: a worker's sessions have an
// idle_in_transaction_session_timeout of half the lease plus 5 s.
const frozenTxLife = leaseDuration/2 + 5*time.Second

// checkFrozenLane checks that another worker sent the frozen send's lane,
// and only once the frozen worker's transaction, which holds the lane row,
// had ended.
func checkFrozenLane(t *testing.T, s *system) {
	frozen, at := s.broker.frozenSend()
	if !frozen {
		t.Fatal("no send was frozen")
	}
	starts := s.broker.otherSendsOfFrozenLane()
	for _, st := range starts {
		// The transaction went idle at its last statement, just before
		// the send froze.
		if d := st.Sub(at); d < frozenTxLife-200*time.Millisecond {
			t.Errorf("the frozen lane was sent by another worker %s after the freeze, while the frozen worker's transaction could hold it", d)
		}
	}
	if len(starts) == 0 {
		t.Error("no other worker took over the frozen lane")
	}
}

// insertBadRows writes rows no worker can send straight into the outbox:
// three whose headers do not decode (dead-lettered as corrupt) and two
// naming a transport no worker has (left in the table, since another
// process may have it).
func insertBadRows(t *testing.T, s *system) {
	good, err := headers.Encode([]headers.Header{{Name: relayer.HeaderContentType, Value: []byte("application/json")}, {Name: "tenant", Value: []byte("t-1")}})
	must(t, err)
	if _, err := headers.Decode(good[:len(good)-1], nil); err == nil {
		t.Fatal("a truncated header block decodes")
	}
	badVersion := append([]byte{0xee}, good[1:]...)
	if _, err := headers.Decode(badVersion, nil); err == nil {
		t.Fatal("a header block of an unknown version decodes")
	}
	for i, r := range []struct {
		transport string
		hdrs      []byte
	}{{"broker", bytes.Repeat([]byte{0xff}, 12)}, {"broker", good[:len(good)-1]}, {"broker", badVersion}, {"nope", good}, {"nope", good}} {
		id := uuid.Must(relayer.NewID())
		_, err := s.db.Exec(`INSERT INTO `+s.schema+`.outbox (id, message_type, transport, destination, body, headers, created_at)
VALUES ($1, 'faults.event', $2, 'events', $3, $4, now() - interval '1 minute')`, id, r.transport, []byte(fmt.Sprintf(`{"bad":%d}`, i)), r.hdrs)
		must(t, err)
		s.ledger.intend(id)
	}
}

// badHeaders is a header block that does not decode: its count runs past
// its end.
var badHeaders = []byte{1, 0, 0, 0, 5, 0, 0, 0}

// insertBadOrderedRows writes ordered rows no worker can send straight into
// the outbox: two heads whose headers do not decode, each with a good row of
// its key behind it (the heads are parked with their keys, the good rows
// wait), and a row whose key is over relayer.KeyMaxBytes and which the broker
// refuses (its failure cannot be recorded: it is dead-lettered as
// over_limit). The lanes' other keys must go on.
func insertBadOrderedRows(t *testing.T, s *system) {
	good, err := headers.Encode([]headers.Header{{Name: relayer.HeaderContentType, Value: []byte("application/json")}})
	must(t, err)
	long := randomKey(3000)
	refuse := func(m *relayer.Message) bool { return m.Key == long }
	s.broker.refuse.Store(&refuse)
	insert := func(key string, hdrs []byte) {
		lane, err := relayer.Lane(key, relayer.LanesDefault)
		must(t, err)
		id := uuid.Must(relayer.NewID())
		_, err = s.db.Exec(`INSERT INTO `+s.schema+`.outbox (id, message_type, transport, destination, body, headers, ordering_key, lane, created_at)
VALUES ($1, 'faults.step', 'broker', 'steps', '{"bad":true}', $2, $3, $4, now() - interval '1 minute')`, id, hdrs, key, lane)
		must(t, err)
		s.ledger.intend(id)
	}
	for _, key := range []string{"bad-0", "bad-1"} {
		insert(key, badHeaders)
		insert(key, good)
	}
	insert(long, good)
}

// randomKey returns n bytes of text that does not compress.
func randomKey(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rand.IntN(len(alphabet))]
	}
	return string(b)
}

// checkBadOrderedRows checks that the corrupt heads are parked with their
// keys, for an operator to see.
func checkBadOrderedRows(t *testing.T, s *system) {
	parked, err := s.st.ParkedKeys(context.Background(), store.ParkedFilter{}, 10)
	must(t, err)
	if len(parked) != 2 {
		t.Fatalf("parked keys %+v, want the 2 corrupt heads", parked)
	}
	for _, p := range parked {
		if !strings.HasPrefix(p.Head.Key, "bad-") || !strings.Contains(p.Head.LastError, "corrupt row") || p.Waiting != 1 {
			t.Errorf("parked key %q (%s, %d waiting), want a corrupt head with its good row waiting", p.Head.Key, p.Head.LastError, p.Waiting)
		}
	}
}

// poisonKeys publishes 3 messages for each of 4 keys whose every send the
// broker refuses: they fail, wait for their retries and are parked, again
// and again as they are redriven, while the lanes' other keys go on.
func poisonKeys(t *testing.T, s *system) {
	refuse := func(m *relayer.Message) bool { return strings.HasPrefix(m.Key, "poison-") }
	s.broker.refuse.Store(&refuse)
	for k := range 4 {
		var ids []uuid.UUID
		var msgs []relayer.Outgoing
		for n := range 3 {
			id := uuid.Must(relayer.NewID())
			ids = append(ids, id)
			msgs = append(msgs, relayer.NewOutgoing(Poison{n}, relayer.Key(fmt.Sprintf("poison-%d", k)), relayer.WithID(id)))
		}
		must(t, s.writer.RunInTx(context.Background(), s.db, nil, func(tx *enlist.Tx) error {
			return tx.PublishAll(context.Background(), msgs...)
		}))
		s.ledger.intend(ids...)
	}
}

// backlog leaves 20,000 unordered messages for recovery, and makes each
// batch of unordered messages take 20 ms, so that recovery's takes of
// thousands of rows are in flight when workers stop.
func backlog(t *testing.T, s *system) {
	s.broker.delay.Store(int64(20 * time.Millisecond))
	for b := range 20 {
		msgs := make([]relayer.Outgoing, 1000)
		ids := make([]uuid.UUID, len(msgs))
		for i := range msgs {
			ids[i] = uuid.Must(relayer.NewID())
			msgs[i] = relayer.NewOutgoing(Event{-1, b*1000 + i}, relayer.WithID(ids[i]))
		}
		s.ledger.publish(ids, make([]string, len(ids)))
		must(t, s.writer.RunInTx(context.Background(), s.db, nil, func(tx *enlist.Tx) error {
			return tx.PublishAll(context.Background(), msgs...)
		}))
		s.ledger.settle(committed, ids...)
	}
}

func runScenario(t *testing.T, sc scenario) {
	var s *system
	if sc.ownCluster {
		cluster := startCluster(t)
		s = newSystemOn(t, cluster.URL(), "faults")
		s.cluster = cluster
	} else {
		s = newSystem(t)
	}
	s.proxied = sc.proxied
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if sc.setup != nil {
		sc.setup(t, s)
	}
	for range sc.workers {
		if s.startWorker(ctx) == nil {
			t.FailNow()
		}
	}
	stop := make(chan struct{})
	var in injection
	var injected sync.WaitGroup
	if sc.inject != nil {
		injected.Go(func() { in = sc.inject(ctx, s, stop) })
	}
	producers := s.produce(4, standardMix, stop)
	time.Sleep(produceFor())
	close(stop)
	producers.Wait()
	injected.Wait()
	if s.startedNone() {
		s.startWorker(ctx)
	}

	v, drained := s.settleAndCheck(90*time.Second + produceFor())
	var rows, dead int64
	testkit.Within(30*time.Second, func() bool {
		rows, dead = s.outboxLeft(ctx)
		return rows == sc.leftRows && dead == sc.leftDead
	})
	s.stopAll()
	s.endProcesses()
	var reasons map[string]int64
	if err := s.harness(ctx, func(ctx context.Context) (err error) {
		reasons, err = s.st.DeadByReason(ctx)
		return err
	}); err != nil {
		t.Errorf("dead letters by reason: %v", err)
	}
	wantReasons := sc.deadReasons
	if wantReasons == nil && sc.leftDead > 0 {
		wantReasons = map[string]int64{"corrupt": sc.leftDead}
	}
	for reason, n := range wantReasons {
		if reasons[reason] != n {
			t.Errorf("dead letters by reason %v, want %d %s", reasons, n, reason)
		}
	}
	// The consumer stage where the broker got duplicates: the deliveries an
	// inbox is for, racing their first copies.
	var fx effects
	var outOfOrder, ordered int
	if v.Duplicates > 0 {
		ds, _ := s.broker.snapshot()
		fx = s.consumeEffects(ctx, ds)
		// And per-key order through the consumer's failures, end to end:
		// from the producers' commits through the broker to the effects.
		outOfOrder, ordered = s.consumeInOrder(ctx, ds)
	}
	cancel()
	if outOfOrder != 0 {
		t.Errorf("ordered consumer stage: %d of %d effects out of their key's order", outOfOrder, ordered)
	}

	t.Logf("%s: %+v; %s; drained %s after the producers stopped; consumer stage %+v; ordered consumer stage %d effects", sc.name, v, in.note, drained.Round(time.Millisecond), fx, ordered)
	if fx.Missing != 0 || fx.Doubled != 0 || fx.Foreign != 0 {
		t.Errorf("consumer stage: %d delivered messages without their effect, %d with more than one, %d effects of messages never committed",
			fx.Missing, fx.Doubled, fx.Foreign)
	}
	if fx.Handled+fx.Skipped < fx.Deliveries {
		t.Errorf("consumer stage: %d deliveries, %d handled and %d skipped as duplicates", fx.Deliveries, fx.Handled, fx.Skipped)
	}
	if v.Lost != 0 {
		t.Errorf("%d committed messages lost", v.Lost)
	}
	if v.RolledBackDelivered != 0 {
		t.Errorf("%d rolled-back messages delivered", v.RolledBackDelivered)
	}
	if v.OrderViolations != 0 {
		t.Errorf("%d per-key order violations", v.OrderViolations)
	}
	if v.Overlaps != 0 && !sc.overlaps {
		t.Errorf("%d moments with two sends of one lane in flight", v.Overlaps)
	}
	perFault := 0
	if sc.dupsPerFault != nil {
		perFault = sc.dupsPerFault(workerOptions("").InFlight(), sc)
	}
	if v.Duplicates > perFault*in.faults {
		t.Errorf("%d duplicates, more than %d per fault for %d faults", v.Duplicates, perFault, in.faults)
	}
	if sc.maxDrained > 0 && drained > sc.maxDrained {
		t.Errorf("delivery finished %s after the producers stopped, want within %s", drained.Round(time.Millisecond), sc.maxDrained)
	}
	if v.Committed < 100 {
		t.Errorf("only %d messages committed: the producers hardly ran", v.Committed)
	}
	if rows != sc.leftRows || dead != sc.leftDead {
		t.Errorf("left %d outbox rows and %d dead letters, want %d and %d", rows, dead, sc.leftRows, sc.leftDead)
	}
	if sc.check != nil {
		sc.check(t, s)
	}

	cause := "-"
	if v.Duplicates > 0 {
		cause = sc.dupCause
	}
	reportMu.Lock()
	reportRows = append(reportRows, reportRow{scenario: sc.name, injected: strings.TrimSuffix(sc.injected+" ("+in.note+")", " ()"), v: v,
		dupCause: cause, faults: in.faults, perFault: perFault, resume: in.resume, drained: drained})
	reportMu.Unlock()
}

// startedNone reports whether no worker runs (churn may have stopped the
// last), so that one is started to finish the delivery.
func (s *system) startedNone() bool {
	for _, p := range s.procs {
		select {
		case <-p.done:
		default:
			return false
		}
	}
	none := true
	s.workers.Range(func(any, any) bool { none = false; return false })
	return none
}

// checkBaseline checks that the goroutines are back to their count before
// the scenario and the live heap within 16 MiB of its size then, and returns
// what it measured. Resident memory is reported rather than checked: the
// race detector's shadow memory, which the suite runs with, is not given
// back to the system.
func checkBaseline(t *testing.T, scenario string, base baseline) baseline {
	var now baseline
	testkit.Within(15*time.Second, func() bool {
		now = measure()
		return now.goroutines <= base.goroutines+2
	})
	if now.goroutines > base.goroutines+2 {
		buf := make([]byte, 1<<20)
		t.Errorf("%s: %d goroutines after Stop, %d before:\n%s", scenario, now.goroutines, base.goroutines, buf[:runtime.Stack(buf, true)])
	}
	if now.heap > base.heap+16<<20 {
		t.Errorf("%s: live heap %d MiB after Stop, %d MiB before", scenario, now.heap>>20, base.heap>>20)
	}
	return now
}

// writeReport writes the report rows as a Markdown table.
func writeReport(t *testing.T, path string) {
	reportMu.Lock()
	defer reportMu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "| scenario | injected | committed | uncertain | delivered | lost | duplicates (bound: faults × per fault; cause) | order violations | lane overlaps | time to resume | drained after producers stopped | goroutines before → after | heap before → after |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range reportRows {
		resume := "-"
		if r.resume > 0 {
			resume = r.resume.Round(time.Millisecond).String()
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d (≤ %d × %d; %s) | %d | %d | %s | %s | %d → %d | %.1f → %.1f MiB |\n", r.scenario, r.injected,
			r.v.Committed, r.v.Uncertain, r.v.Delivered, r.v.Lost, r.v.Duplicates, r.faults, r.perFault, r.dupCause, r.v.OrderViolations, r.v.Overlaps,
			resume, r.drained.Round(time.Millisecond), r.before.goroutines, r.after.goroutines,
			float64(r.before.heap)/(1<<20), float64(r.after.heap)/(1<<20))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Error(err)
	}
}
