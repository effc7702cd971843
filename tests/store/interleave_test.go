package store_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/internal/tables"
	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

// Interleavings by script: the lane protocol's races run as named steps of
// two or three sessions, each on a connection of its own, in every order
// that keeps each session's steps in their order, as PostgreSQL's isolation
// tester runs its permutations. A step that waits for a lock another
// session holds is left waiting (the server says so in pg_stat_activity)
// while the permutation goes on; an order that would give a waiting session
// its next step cannot happen and is not run. After each permutation the
// lane is drained from the cursors the permutation left, and the result is
// checked: every message delivered (but those deleted by hand), each key's
// first deliveries in commit order, the outbox empty.

// ilStep is one named step of a session.
type ilStep struct {
	name string
	run  func(ctx context.Context, w *ilWorld) error
}

// ilSession is a connection's named steps, in order.
type ilSession struct {
	name  string
	steps []ilStep
	// mayFail is set for a session whose steps may fail: one whose
	// connection another session terminates.
	mayFail bool
}

// ilSpec is a race: what the outbox holds first, the sessions, and which
// worker drains the lane afterwards.
type ilSpec struct {
	name     string
	setup    func(ctx context.Context, w *ilWorld) error
	sessions []ilSession
	// drainer names the worker whose cursor drains the lane at the end.
	drainer string
}

// ilWorld is one permutation's state: the sessions' connections, the
// ordered workers' cursors and transactions, what was committed and what
// was delivered.
type ilWorld struct {
	t       *testing.T
	b       *bundle
	conns   map[string]*sql.Conn
	pids    map[string]int
	workers map[string]*ilWorker
	// committed holds, per key, the ids committed in commit order; deleted
	// the ids deleted by hand.
	// refused holds the keys whose sends fail (guarded by mu): parked, or
	// with retryRefused made to wait an hour for a retry.
	refused      map[string]bool
	retryRefused bool
	// open holds producers' transactions in progress and the rows they
	// wrote, by session.
	open map[string]*ilOpenTx

	// mu guards what steps of several sessions write: a step that waited
	// for a lock may end while another session's step runs.
	mu        sync.Mutex
	committed map[string][]uuid.UUID // per key, in commit order
	deleted   map[uuid.UUID]bool     // deleted by hand
	delivered []uuid.UUID            // every send, in order
}

// ilOpenTx is a producer's transaction in progress.
type ilOpenTx struct {
	tx   *sql.Tx
	rows []relayer.Message
}

// ilWorker is an ordered worker of lane 0, as the dispatcher runs one: a
// batch is a transaction that takes or renews the lane's lease, reads from
// the cursor, sends, settles and commits, then advances the cursor.
type ilWorker struct {
	name   string
	token  uuid.UUID
	cursor workerstore.LaneCursor
	tx     *sql.Tx
	st     *workerstore.Store
	held   bool // the batch holds the lease
	rows   []store.Row
	reads  []workerstore.LaneRead
	// lastRead is how many rows the last batch read.
	lastRead int
}

const ilLease = time.Minute

// errNoBatch is a worker step's error when its batch did not begin.
var errNoBatch = errors.New("no batch began")

// begin starts a batch on the worker's connection and takes or renews the
// lane's lease; a lease another holder has is not taken, and the batch then
// reads and sends nothing.
func (w *ilWorld) begin(ctx context.Context, name string) error {
	wk := w.worker(name)
	wk.held = false
	tx, err := w.conns[name].BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	st, err := w.b.store.With(tx)
	if err != nil {
		return err
	}
	lanes, err := acquireLanes(ctx, st, []int{0}, name, wk.token, ilLease)
	if err != nil {
		tx.Rollback()
		return err
	}
	wk.tx, wk.st, wk.held = tx, st, slices.Equal(lanes, []int{0})
	if !wk.held {
		wk.cursor = workerstore.NewLaneCursor(0) // another holder may change the lane
	}
	return nil
}

// read reads the lane from the worker's cursor.
func (w *ilWorld) read(ctx context.Context, name string) error {
	wk := w.worker(name)
	if wk.tx == nil {
		return errNoBatch
	}
	if !wk.held {
		return nil
	}
	var err error
	wk.rows, wk.reads, err = wk.st.ReadLanes(ctx, nil, []workerstore.LaneCursor{wk.cursor}, 10)
	return err
}

// settle sends the rows read, parks the head of each refused key (and
// leaves the rest of its rows), deletes the rows sent, commits and advances
// the cursor.
func (w *ilWorld) settle(ctx context.Context, name string) error {
	wk := w.worker(name)
	if wk.tx == nil {
		return errNoBatch
	}
	wk.lastRead = len(wk.rows)
	defer func() {
		wk.tx.Rollback() // after a failure; nothing after the commit
		wk.tx, wk.st, wk.rows, wk.reads = nil, nil, nil, nil
	}()
	if !wk.held {
		return nil
	}
	var sent []uuid.UUID
	var failed []store.Failure
	var heldKeys []string
	var retryAt time.Time
	w.mu.Lock()
	for _, r := range wk.rows {
		switch {
		case slices.Contains(heldKeys, r.Key):
		case w.refused[r.Key]:
			f := store.Failure{ID: r.ID, Error: "refused"}
			if w.retryRefused {
				f.RetryAt = time.Now().Add(time.Hour)
				retryAt = f.RetryAt
			}
			failed = append(failed, f)
			heldKeys = append(heldKeys, r.Key)
		default:
			sent = append(sent, r.ID)
		}
	}
	w.delivered = append(w.delivered, sent...) // the broker has them, whatever follows
	w.mu.Unlock()
	switch {
	case len(failed) == 0:
	case w.retryRefused:
		if _, err := wk.st.FailLaneRows(ctx, failed, wk.token); err != nil {
			return err
		}
	default:
		if _, err := wk.st.ParkLaneRows(ctx, failed, wk.token); err != nil {
			return err
		}
	}
	if _, err := wk.st.DeleteLaneRows(ctx, sent, wk.token); err != nil {
		return err
	}
	if err := wk.tx.Commit(); err != nil {
		wk.cursor = workerstore.NewLaneCursor(0)
		return err
	}
	if len(wk.reads) > 0 {
		wk.cursor = wk.cursor.Advance(wk.reads[0], wk.rows, len(wk.rows), retryAt, heldKeys...)
	}
	return nil
}

// batch runs a whole batch as one step.
func (w *ilWorld) batch(ctx context.Context, name string) error {
	if err := w.begin(ctx, name); err != nil {
		return err
	}
	if err := w.read(ctx, name); err != nil {
		w.workers[name].tx.Rollback()
		return err
	}
	return w.settle(ctx, name)
}

func (w *ilWorld) worker(name string) *ilWorker {
	wk := w.workers[name]
	if wk == nil {
		wk = &ilWorker{name: name, token: uuid.New(), cursor: workerstore.NewLaneCursor(0)}
		w.workers[name] = wk
	}
	return wk
}

// publish writes one message of key on lane 0 for each key given, in
// order: in the session's open transaction if it has one, else each
// committed at once.
func (w *ilWorld) publish(ctx context.Context, session string, keys ...string) error {
	var q store.DBTX = w.conns[session]
	open := w.open[session]
	if open != nil {
		q = open.tx
	}
	st, err := w.b.store.With(q)
	if err != nil {
		return err
	}
	for _, key := range keys {
		m := w.b.ordered(w.t, key, 1)
		if err := st.Insert(ctx, []relayer.Message{m}); err != nil {
			return err
		}
		if open != nil {
			open.rows = append(open.rows, m)
			continue
		}
		w.mu.Lock()
		w.committed[key] = append(w.committed[key], m.ID)
		w.mu.Unlock()
	}
	return nil
}

// beginTx opens a producer's transaction on the session's connection.
func (w *ilWorld) beginTx(ctx context.Context, session string) error {
	tx, err := w.conns[session].BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	w.open[session] = &ilOpenTx{tx: tx}
	return nil
}

// commitTx commits the session's producer transaction.
func (w *ilWorld) commitTx(session string) error {
	open := w.open[session]
	delete(w.open, session)
	if err := open.tx.Commit(); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range open.rows {
		w.committed[m.Key] = append(w.committed[m.Key], m.ID)
	}
	return nil
}

// exec runs a statement on the session's connection, $outbox and $leases
// naming the outbox's tables.
func (w *ilWorld) exec(ctx context.Context, session, query string) error {
	_, err := w.conns[session].ExecContext(ctx, w.tables(query))
	return err
}

func (w *ilWorld) tables(query string) string {
	n := tables.Of(w.b.opts.Schema, w.b.opts.TablePrefix)
	return strings.NewReplacer("$outbox", n.Outbox, "$leases", n.Leases).Replace(query)
}

// interleave runs spec in every permutation of its sessions' steps.
func interleave(t *testing.T, b *bundle, spec ilSpec) {
	t.Helper()
	run, impossible := 0, 0
	for _, perm := range permutations(spec.sessions) {
		if runPermutation(t, b, spec, perm) {
			run++
		} else {
			impossible++
		}
	}
	if run == 0 {
		t.Fatalf("%s: no permutation could run", spec.name)
	}
	t.Logf("%s: %d permutations run, %d impossible (a waiting session given its next step)", spec.name, run, impossible)
}

// permutations returns every order of the sessions' steps that keeps each
// session's own order, as session indexes.
func permutations(sessions []ilSession) [][]int {
	left := make([]int, len(sessions))
	total := 0
	for i, s := range sessions {
		left[i] = len(s.steps)
		total += len(s.steps)
	}
	var out [][]int
	var walk func(prefix []int)
	walk = func(prefix []int) {
		if len(prefix) == total {
			out = append(out, slices.Clone(prefix))
			return
		}
		for i := range sessions {
			if left[i] > 0 {
				left[i]--
				walk(append(prefix, i))
				left[i]++
			}
		}
	}
	walk(nil)
	return out
}

// runPermutation runs one permutation on an emptied outbox and checks its
// result; it reports false when the permutation cannot happen.
func runPermutation(t *testing.T, b *bundle, spec ilSpec, perm []int) bool {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &ilWorld{t: t, b: b, conns: map[string]*sql.Conn{}, pids: map[string]int{}, workers: map[string]*ilWorker{},
		refused: map[string]bool{}, open: map[string]*ilOpenTx{}, committed: map[string][]uuid.UUID{}, deleted: map[uuid.UUID]bool{}}
	if _, err := b.db.ExecContext(ctx, w.tables(`DELETE FROM $outbox; DELETE FROM $leases`)); err != nil {
		t.Fatal(err)
	}
	var opened []*sql.Conn
	connect := func(name string) {
		var c *sql.Conn
		var pid int
		for attempt := 1; ; attempt++ {
			var err error
			if c, err = b.db.Conn(ctx); err != nil {
				t.Fatal(err)
			}
			if err = c.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err == nil {
				break
			}
			// A connection a previous permutation's session killed: the
			// pool learns it is gone when it is used.
			c.Raw(func(any) error { return driver.ErrBadConn })
			if attempt == 3 {
				t.Fatal(err)
			}
		}
		w.conns[name], w.pids[name] = c, pid
		opened = append(opened, c)
	}
	for _, s := range spec.sessions {
		connect(s.name)
	}
	connect(spec.drainer + "/drain")
	defer func() {
		for _, c := range opened {
			c.Close() // back to the pool, which drops it if a session killed it
		}
	}()
	if err := spec.setup(ctx, w); err != nil {
		t.Fatalf("%s: setup: %v", spec.name, err)
	}

	var names []string
	next := make([]int, len(spec.sessions))
	waiting := map[int]chan error{} // sessions whose step waits for a lock
	var failures []string
	record := func(i int, step string, err error) {
		if err != nil && !spec.sessions[i].mayFail {
			failures = append(failures, fmt.Sprintf("%s.%s: %v", spec.sessions[i].name, step, err))
		}
	}
	for _, i := range perm {
		s := spec.sessions[i]
		step := s.steps[next[i]]
		next[i]++
		names = append(names, s.name+"."+step.name)
		if waiting[i] != nil {
			cancel()
			for _, done := range waiting {
				<-done
			}
			return false
		}
		done := make(chan error, 1)
		go func() { done <- step.run(ctx, w) }()
		if ended, err := w.await(ctx, s.name, done); ended {
			record(i, step.name, err)
		} else {
			waiting[i] = done
			names[len(names)-1] += "(waits)"
		}
		for j, d := range waiting { // did that step release a waiting one?
			if ended, err := w.await(ctx, spec.sessions[j].name, d); ended {
				delete(waiting, j)
				record(j, spec.sessions[j].steps[next[j]-1].name, err)
			}
		}
	}
	for j, d := range waiting {
		select {
		case err := <-d:
			record(j, spec.sessions[j].steps[next[j]-1].name, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s [%s]: %s.%s still waits after every step ran", spec.name, strings.Join(names, " "),
				spec.sessions[j].name, spec.sessions[j].steps[next[j]-1].name)
		}
	}
	label := spec.name + " [" + strings.Join(names, " ") + "]"
	if len(failures) > 0 {
		t.Errorf("%s: %s", label, strings.Join(failures, "; "))
	}
	for _, wk := range w.workers {
		if wk.tx != nil {
			wk.tx.Rollback()
		}
	}
	for _, open := range w.open {
		open.tx.Rollback()
	}
	w.drain(ctx, label, spec.drainer)
	return true
}

// await waits until the session's step ends, or the server reports the
// session waiting for a lock; it reports whether the step ended.
func (w *ilWorld) await(ctx context.Context, session string, done chan error) (bool, error) {
	for {
		select {
		case err := <-done:
			return true, err
		case <-time.After(time.Millisecond):
		}
		var waits bool
		if err := w.b.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock')`,
			w.pids[session]).Scan(&waits); err != nil {
			w.t.Fatal(err)
		}
		if waits {
			select {
			case err := <-done:
				return true, err
			default:
				return false, nil
			}
		}
	}
}

// drain lets the time of every other lease pass, then delivers the lane
// from the drainer's cursor, with no key refused any more, and checks the
// result: no row left, every committed message delivered but those deleted
// by hand, each key's first deliveries in commit order.
func (w *ilWorld) drain(ctx context.Context, perm, drainer string) {
	t := w.t
	if _, err := w.b.db.ExecContext(ctx, w.tables(`UPDATE $leases SET expires_at = now() - interval '1 second' WHERE owner <> $1`), drainer); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	clear(w.refused)
	w.mu.Unlock()
	wk := w.worker(drainer)
	w.conns[drainer] = w.conns[drainer+"/drain"] // its own may be gone
	for range 5 {
		if err := w.batch(ctx, drainer); err != nil {
			t.Fatalf("%s: drain: %v", perm, err)
		}
		if wk.lastRead == 0 && wk.held {
			break
		}
	}
	var left int
	if err := w.b.db.QueryRowContext(ctx, w.tables(`SELECT count(*) FROM $outbox`)).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left > 0 {
		t.Errorf("%s: %d rows left that the drainer's cursor does not read", perm, left)
	}
	first := map[uuid.UUID]int{}
	for i, id := range w.delivered {
		if _, ok := first[id]; !ok {
			first[id] = i
		}
	}
	for key, ids := range w.committed {
		last := -1
		for n, id := range ids {
			pos, ok := first[id]
			switch {
			case !ok && !w.deleted[id]:
				t.Errorf("%s: %s#%d never delivered", perm, key, n+1)
			case ok && pos < last:
				t.Errorf("%s: %s#%d delivered before an earlier message of its key", perm, key, n+1)
			}
			last = max(last, pos)
		}
	}
}

// lift ends the refusal of key's sends, as the fix that comes before a
// release does.
func (w *ilWorld) lift(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.refused, key)
}

// takeoverSteps are the batch of a worker taking over a lane, in two steps.
func takeoverSteps(name string) []ilStep {
	return []ilStep{
		{"begin and read", func(ctx context.Context, w *ilWorld) error {
			if err := w.begin(ctx, name); err != nil {
				return err
			}
			return w.read(ctx, name)
		}},
		{"settle", func(ctx context.Context, w *ilWorld) error { return w.settle(ctx, name) }},
	}
}

// workerSteps are a batch's three steps for the named worker.
func workerSteps(name string) []ilStep {
	return []ilStep{
		{"begin", func(ctx context.Context, w *ilWorld) error { return w.begin(ctx, name) }},
		{"read", func(ctx context.Context, w *ilWorld) error { return w.read(ctx, name) }},
		{"settle", func(ctx context.Context, w *ilWorld) error { return w.settle(ctx, name) }},
	}
}

// A held key released, by any program, between two reads of its lane, while
// later messages of the key commit: the released head goes before them.
func TestInterleavingsReleaseBetweenReads(t *testing.T) {
	t.Parallel()
	b := setup(t, "pgx")
	releases := []struct {
		name  string
		retry bool // the key waits for a retry rather than being parked
		run   func(ctx context.Context, w *ilWorld) error
	}{
		{"parked key released by an UPDATE by hand", false, func(ctx context.Context, w *ilWorld) error {
			w.lift("p")
			return w.exec(ctx, "O", `UPDATE $outbox SET parked_at = NULL, attempts = 0, retry_at = NULL WHERE parked_at IS NOT NULL`)
		}},
		{"parked head deleted by hand", false, func(ctx context.Context, w *ilWorld) error {
			w.lift("p")
			var id uuid.UUID
			if err := w.conns["O"].QueryRowContext(ctx, w.tables(`DELETE FROM $outbox WHERE parked_at IS NOT NULL RETURNING id`)).Scan(&id); err != nil {
				return err
			}
			w.mu.Lock()
			w.deleted[id] = true
			w.mu.Unlock()
			return nil
		}},
		{"parked key released by RetryParked", false, func(ctx context.Context, w *ilWorld) error {
			w.lift("p")
			st, err := w.b.store.With(w.conns["O"])
			if err != nil {
				return err
			}
			_, err = st.RetryParked(ctx, store.ParkedFilter{Key: "p"})
			return err
		}},
		{"retry time cleared by hand", true, func(ctx context.Context, w *ilWorld) error {
			w.lift("p")
			return w.exec(ctx, "O", `UPDATE $outbox SET retry_at = NULL WHERE retry_at IS NOT NULL`)
		}},
	}
	for _, r := range releases {
		interleave(t, b, ilSpec{
			name:    r.name,
			drainer: "W",
			setup: func(ctx context.Context, w *ilWorld) error {
				w.refused["p"], w.retryRefused = true, r.retry
				if err := w.publish(ctx, "P", "p", "p", "o"); err != nil {
					return err
				}
				return w.batch(ctx, "W") // p#1 held, p#2 behind it, o#1 sent
			},
			sessions: []ilSession{
				{name: "W", steps: workerSteps("W")},
				{name: "O", steps: []ilStep{{"release", r.run}}},
				{name: "P", steps: []ilStep{{"publish", func(ctx context.Context, w *ilWorld) error { return w.publish(ctx, "P", "p", "o") }}}},
			},
		})
	}
}

// A producer's transaction that commits while a worker reads the lane, with
// rows of another key committing around it: none is skipped.
func TestInterleavingsCommitDuringRead(t *testing.T) {
	t.Parallel()
	b := setup(t, "pgx")
	interleave(t, b, ilSpec{
		name:    "commit during a read",
		drainer: "W",
		setup: func(ctx context.Context, w *ilWorld) error {
			if err := w.publish(ctx, "P", "a"); err != nil {
				return err
			}
			return w.batch(ctx, "W") // the cursor is past a#1
		},
		sessions: []ilSession{
			{name: "W", steps: workerSteps("W")},
			{name: "P", steps: []ilStep{
				{"write", func(ctx context.Context, w *ilWorld) error {
					if err := w.beginTx(ctx, "P"); err != nil {
						return err
					}
					return w.publish(ctx, "P", "a")
				}},
				{"commit", func(ctx context.Context, w *ilWorld) error { return w.commitTx("P") }},
			}},
			{name: "Q", steps: []ilStep{{"publish", func(ctx context.Context, w *ilWorld) error { return w.publish(ctx, "Q", "b") }}}},
		},
	})
}

// A worker's lease lost mid-batch, its session killed, or its lease expired
// between two batches, while another worker takes the lane: nothing is lost
// and each key's first deliveries keep their order.
func TestInterleavingsLeaseLost(t *testing.T) {
	t.Parallel()
	b := setup(t, "pgx")
	interleave(t, b, ilSpec{
		name:    "session killed mid-batch",
		drainer: "W2",
		setup: func(ctx context.Context, w *ilWorld) error {
			return w.publish(ctx, "X", "a", "a", "b")
		},
		sessions: []ilSession{
			{name: "W1", steps: workerSteps("W1"), mayFail: true},
			{name: "X", steps: []ilStep{{"kill W1", func(ctx context.Context, w *ilWorld) error {
				_, err := w.conns["X"].ExecContext(ctx, `SELECT pg_terminate_backend($1)`, w.pids["W1"])
				return err
			}}}},
			{name: "W2", steps: takeoverSteps("W2")},
		},
	})
	interleave(t, b, ilSpec{
		name:    "lease expired between batches",
		drainer: "W2",
		setup: func(ctx context.Context, w *ilWorld) error {
			if err := w.publish(ctx, "X", "a"); err != nil {
				return err
			}
			if err := w.batch(ctx, "W1"); err != nil { // W1 holds the lane, its cursor past a#1
				return err
			}
			return w.publish(ctx, "X", "a", "b")
		},
		sessions: []ilSession{
			{name: "W1", steps: workerSteps("W1")},
			{name: "X", steps: []ilStep{{"expire W1's lease", func(ctx context.Context, w *ilWorld) error {
				return w.exec(ctx, "X", `UPDATE $leases SET expires_at = now() - interval '1 second' WHERE owner = 'W1'`)
			}}}},
			{name: "W2", steps: takeoverSteps("W2")},
		},
	})
}
