package mixed

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

// previousRelease is the commit of the release before this one: there is
// no tag yet, so it is pinned here, and moved on at each release.
const previousRelease = "7b584083121f5fa78282e63c0e211bc22be06684"

func TestMain(m *testing.M) { testdb.Main(m) }

// Step is the ordered message the test publishes; Event the unordered one.
type Step struct {
	Key string
	Seq int
}

// Event is an unordered message.
type Event struct{ Seq int }

// MessageType names Step as the worker program routes it.
func (Step) MessageType() string { return "mixed.step" }

// MessageType names Event as the worker program routes it.
func (Event) MessageType() string { return "mixed.event" }

// releases holds the programs of both releases.
type releases struct {
	oldCLI, oldWorker, newCLI, newWorker string
}

// buildReleases builds the relayer command and the worker program of this
// release (the workspace) and of the previous one (its source from git).
func buildReleases(t *testing.T) releases {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, previousRelease, src)
	if out, err := archive.CombinedOutput(); err != nil {
		msg := fmt.Sprintf("the previous release's source (commit %s) is not in this checkout's history: %v\n%s", previousRelease, err, out)
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatal(msg + " (failing rather than skipping because CI=true)")
		}
		t.Skip(msg)
	}
	worker, err := os.ReadFile("worker/main.go")
	if err != nil {
		t.Fatal(err)
	}
	oldDir := filepath.Join(src, "cmd", "relayer")
	if err := os.MkdirAll(filepath.Join(oldDir, "mixedworker"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(oldDir, "mixedworker", "main.go"), worker, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(oldDir, "mixedworker", "listen.go"), []byte(previousListen), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	oldBin, newBin := filepath.Join(bin, "old")+"/", filepath.Join(bin, "new")+"/"
	goBuild(t, oldDir, oldBin, ".", "./mixedworker")
	goBuild(t, root, newBin, "./cmd/relayer", "./tests/mixed/worker")
	return releases{oldCLI: oldBin + "relayer", oldWorker: oldBin + "mixedworker", newCLI: newBin + "relayer", newWorker: newBin + "worker"}
}

// previousListen is the worker program's listen.go for the previous
// release, whose wake-up listener waits on the pool's connections itself.
const previousListen = `package main

import "github.com/relayer-go/relayer/dispatch"

func listen(o *dispatch.RunnerOptions) { o.Listen = true }

func listening(r *dispatch.Runner) bool { return r.Listening() }
`

// goBuild builds pkgs in dir (in the workspace dir is in) into out.
func goBuild(t *testing.T, dir, out string, pkgs ...string) {
	start := time.Now()
	cmd := exec.Command("go", append([]string{"build", "-o", out}, pkgs...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v in %s: %v\n%s", pkgs, dir, err, b)
	}
	t.Logf("built %v in %s in %s", pkgs, dir, time.Since(start).Round(time.Millisecond))
}

// run runs a relayer command against the test database and returns its
// standard output and error.
func run(t *testing.T, bin string, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+testdb.URL(t))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// mustRun runs a relayer command that must succeed.
func mustRun(t *testing.T, bin string, args ...string) string {
	t.Helper()
	stdout, stderr, err := run(t, bin, args...)
	if err != nil {
		t.Fatalf("%s %v: %v\n%s%s", filepath.Base(filepath.Dir(bin))+"/"+filepath.Base(bin), args, err, stdout, stderr)
	}
	return stdout
}

func TestMixedVersions(t *testing.T) {
	testdb.URL(t) // skip early without a database
	rel := buildReleases(t)
	t.Run("this release refuses the previous schema", func(t *testing.T) { previousSchema(t, rel) })
	t.Run("both releases side by side", func(t *testing.T) { sideBySide(t, rel) })
	t.Run("wake-ups across releases", func(t *testing.T) { wakeUps(t, rel) })
}

// previousSchema: tables the previous release created are refused by this
// release's command and workers, each naming the migration to run; once
// migrated, both releases accept them.
func previousSchema(t *testing.T, rel releases) {
	schema := testdb.NewSchema(t)
	mustRun(t, rel.oldCLI, "migrate", "--schema", schema)
	_, stderr, err := run(t, rel.newCLI, "stats", "--schema", schema)
	if err == nil || !strings.Contains(stderr, "relayer migrate") {
		t.Fatalf("this release's stats on the previous schema: %v, stderr %q; want a refusal naming relayer migrate", err, stderr)
	}
	w := startWorker(t, rel.newWorker, schema, "refused", t.TempDir())
	if err := w.waitStarted(); err == nil || !strings.Contains(w.stderr.String(), "relayer migrate") {
		t.Fatalf("this release's worker on the previous schema: %v, stderr %q; want a refusal naming relayer migrate", err, w.stderr.String())
	}
	mustRun(t, rel.newCLI, "migrate", "--schema", schema)
	mustRun(t, rel.newCLI, "stats", "--schema", schema)
	mustRun(t, rel.oldCLI, "stats", "--schema", schema)
}

// worker is a worker process.
type worker struct {
	name    string
	cmd     *exec.Cmd
	started chan struct{}
	done    chan struct{}
	err     error // set before done closes
	stderr  *syncBuffer
}

// syncBuffer is a buffer written by a process's output copier and read by
// the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startWorker starts a worker process of the program bin; dir holds the
// arrivals file and the refusal's end marker; args are more flags.
func startWorker(t *testing.T, bin, schema, name, dir string, args ...string) *worker {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"-database-url", testdb.URL(t), "-schema", schema, "-name", name,
		"-arrivals", filepath.Join(dir, "arrivals"), "-refuse-until", filepath.Join(dir, "healed")}, args...)...)
	w := &worker{name: name, cmd: cmd, started: make(chan struct{}), done: make(chan struct{}), stderr: &syncBuffer{}}
	cmd.Stderr = w.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "started" {
				close(w.started)
			}
		}
		w.err = cmd.Wait()
		close(w.done)
	}()
	t.Cleanup(func() { w.stop() })
	return w
}

// waitStarted waits until the worker's Runner runs, or its process ends.
func (w *worker) waitStarted() error {
	select {
	case <-w.started:
		return nil
	case <-w.done:
		return fmt.Errorf("worker %s ended before it started: %v", w.name, w.err)
	case <-time.After(time.Minute):
		return fmt.Errorf("worker %s did not start within a minute", w.name)
	}
}

// kill ends the worker with SIGKILL.
func (w *worker) kill() {
	w.cmd.Process.Kill()
	<-w.done
}

// stop ends the worker with SIGTERM, then SIGKILL after 30 s.
func (w *worker) stop() {
	select {
	case <-w.done:
		return
	default:
	}
	w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		w.kill()
	}
}

// published is what the producers committed, per key in commit order.
type published struct {
	mu    sync.Mutex
	byKey map[string][]uuid.UUID
	ids   map[uuid.UUID]bool
}

// count returns how many messages were committed so far.
func (p *published) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ids)
}

func (p *published) add(key string, id uuid.UUID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if key != "" {
		p.byKey[key] = append(p.byKey[key], id)
	}
	p.ids[id] = true
}

// sideBySide runs two workers of each release on this release's schema while
// this release's writers publish; parks keys and releases them with both
// releases' commands; kills a worker of each release with SIGKILL and
// starts another. Every committed message must arrive, the first arrivals
// of each key in commit order, and the outbox must empty.
func sideBySide(t *testing.T, rel releases) {
	ctx := context.Background()
	schema := testdb.NewSchema(t)
	mustRun(t, rel.newCLI, "migrate", "--schema", schema)
	dir := t.TempDir()

	var routes relayer.Routes
	must(t, relayer.AddType[Step](&routes, relayer.Route{Transport: "file", Destination: "steps", Ordered: true}))
	must(t, relayer.AddType[Event](&routes, relayer.Route{Transport: "file", Destination: "events"}))
	outbox := relayer.Outbox{Schema: schema, Routes: &routes}
	writer, err := enlist.NewWriter(outbox, enlist.Options{})
	must(t, err)
	db, err := sql.Open("pgx", testdb.URL(t))
	must(t, err)
	t.Cleanup(func() { db.Close() })
	st, err := workerstore.New(db, store.TablesOf(outbox))
	must(t, err)

	var workers []*worker
	n := 0
	start := func(bin string) *worker {
		n++
		w := startWorker(t, bin, schema, fmt.Sprintf("w%d-%s", n, filepath.Base(filepath.Dir(bin))), dir)
		if err := w.waitStarted(); err != nil {
			t.Fatalf("%v\n%s", err, w.stderr.String())
		}
		workers = append(workers, w)
		return w
	}
	for _, bin := range []string{rel.oldWorker, rel.newWorker, rel.oldWorker, rel.newWorker} {
		start(bin)
	}

	// Four producers, each publishing on keys of its own so that its commits
	// are each key's commit order: ten plain keys each, and keys whose
	// messages the workers refuse until the healed file exists, which park.
	pub := &published{byKey: map[string][]uuid.UUID{}, ids: map[uuid.UUID]bool{}}
	refused := func(p int) []string {
		return []string{fmt.Sprintf("refused-old-%d", p), fmt.Sprintf("refused-old-%d-b", p), fmt.Sprintf("refused-new-%d", p)}
	}
	stop := make(chan struct{})
	var producers sync.WaitGroup
	var produceErr error
	var produceFailed atomic.Bool // set with produceErr, for waits while they produce
	var errOnce sync.Once
	for p := range 4 {
		producers.Go(func() {
			seq := map[string]int{}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("k%d-%d", p, i%10)
				if i%7 == 0 {
					keys := refused(p)
					key = keys[(i/7)%len(keys)]
				}
				seq[key]++
				step := relayer.NewOutgoing(Step{Key: key, Seq: seq[key]}, relayer.Key(key))
				event := relayer.NewOutgoing(Event{Seq: i})
				var stepID, eventID uuid.UUID
				err := writer.RunInTx(ctx, db, nil, func(tx *enlist.Tx) error {
					stepID, eventID = uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
					step.ID, event.ID = stepID, eventID
					return tx.PublishAll(ctx, step, event)
				})
				if err != nil {
					errOnce.Do(func() { produceErr = err; produceFailed.Store(true) })
					return
				}
				pub.add(key, stepID)
				pub.add("", eventID)
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	endProducers := func() {
		close(stop)
		producers.Wait()
		if produceErr != nil {
			t.Fatalf("publish: %v", produceErr)
		}
	}
	defer func() {
		select {
		case <-stop:
		default:
			endProducers()
		}
	}()
	// trafficGoesOn waits for the producers to commit n more transactions
	// (two messages each).
	trafficGoesOn := func(n int) {
		t.Helper()
		want := pub.count() + 2*n
		testkit.Eventually(t, 30*time.Second, func() bool { return pub.count() >= want || produceFailed.Load() }, "%d more transactions committed", n)
	}

	// Kill a worker of each release mid-traffic, starting another of its
	// release each time.
	for _, i := range []int{0, 1} {
		trafficGoesOn(300)
		workers[i].kill()
		start([]string{rel.oldWorker, rel.newWorker}[i])
	}
	// Every refused key parked, with messages waiting behind its head, and
	// traffic meanwhile on every lane.
	var refusedKeys []string
	for p := range 4 {
		refusedKeys = append(refusedKeys, refused(p)...)
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		parked, err := st.ParkedKeys(ctx, store.ParkedFilter{}, 100)
		must(t, err)
		return len(parked) == len(refusedKeys)
	}, "%d keys parked", len(refusedKeys))
	trafficGoesOn(200)
	// Heal, then release the refused keys: "refused-old-" ones with the
	// previous release's command, one key at a time, the rest with this
	// release's, all at once.
	must(t, os.WriteFile(filepath.Join(dir, "healed"), nil, 0o644))
	for _, key := range refusedKeys {
		if strings.HasPrefix(key, "refused-old-") {
			mustRun(t, rel.oldCLI, "parked", "retry", "--schema", schema, "--key", key)
		}
	}
	mustRun(t, rel.newCLI, "parked", "retry", "--schema", schema, "--all")
	// Traffic goes on after the release, on the released keys too; a
	// worker of each release is killed once more.
	for _, i := range []int{2, 3} {
		trafficGoesOn(200)
		workers[i].kill()
		start([]string{rel.oldWorker, rel.newWorker}[i-2])
	}
	trafficGoesOn(200)
	endProducers()

	// Nothing waits forever: the outbox empties.
	var rows int
	if !testkit.Within(45*time.Second, func() bool {
		must(t, db.QueryRowContext(ctx, `SELECT count(*) FROM `+schema+`.outbox`).Scan(&rows))
		return rows == 0
	}) {
		stats, _, _ := run(t, rel.newCLI, "stats", "--schema", schema)
		t.Fatalf("%d outbox rows left 45 s after the producers stopped:\n%s", rows, stats)
	}
	for _, w := range workers {
		w.stop()
	}
	checkArrivals(t, filepath.Join(dir, "arrivals"), pub, refusedKeys)
}

// wakeUps runs each release's writers against the other release's worker,
// alone on its schema, with a poll of a minute (and leases of four): the writer's wake-ups
// across processes (a NOTIFY with a payload from this release, without one
// from the previous) must bring every message, ordered and unordered, to
// the worker well before its poll would.
func wakeUps(t *testing.T, rel releases) {
	const poll, within = time.Minute, 15 * time.Second
	for _, run := range []struct{ name, writer, worker string }{
		{"this release's writer, the previous release's worker", "", rel.oldWorker},
		{"the previous release's writer, this release's worker", rel.oldWorker, rel.newWorker},
	} {
		t.Run(run.name, func(t *testing.T) {
			ctx := context.Background()
			schema := testdb.NewSchema(t)
			mustRun(t, rel.newCLI, "migrate", "--schema", schema)
			dir := t.TempDir()
			w := startWorker(t, run.worker, schema, "waker", dir, "-listen", "-poll", poll.String(), "-lease", (4 * poll).String())
			if err := w.waitStarted(); err != nil {
				t.Fatalf("%v\n%s", err, w.stderr.String())
			}
			// Past the worker's first probe and recovery's first take, which
			// run at its start.
			time.Sleep(time.Second)
			pub := &published{byKey: map[string][]uuid.UUID{}, ids: map[uuid.UUID]bool{}}
			const key, n = "woken", 20
			if run.writer != "" {
				out := mustRun(t, run.writer, "-database-url", testdb.URL(t), "-schema", schema, "-publish", strconv.Itoa(n), "-key", key)
				for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
					fields := strings.Fields(line)
					if len(fields) != 3 || fields[0] != "published" {
						t.Fatalf("publisher's line %q", line)
					}
					stepID, err1 := uuid.Parse(fields[1])
					eventID, err2 := uuid.Parse(fields[2])
					if err := errors.Join(err1, err2); err != nil {
						t.Fatalf("publisher's line %q: %v", line, err)
					}
					pub.add(key, stepID)
					pub.add("", eventID)
				}
			} else {
				publishWoken(t, ctx, schema, key, n, pub)
			}
			if len(pub.ids) != 2*n {
				t.Fatalf("%d messages published, want %d", len(pub.ids), 2*n)
			}
			// Every message arrives within far less than a poll.
			arrivals := filepath.Join(dir, "arrivals")
			arrived := func() int { b, _ := os.ReadFile(arrivals); return strings.Count(string(b), "\n") }
			if !testkit.Within(within, func() bool { return arrived() >= 2*n }) {
				t.Fatalf("%d of %d messages arrived %s after the last commit, with a poll of %s: the wake-ups did not wake the worker\n%s",
					arrived(), 2*n, within, poll, w.stderr.String())
			}
			w.stop()
			checkArrivals(t, arrivals, pub, nil)
		})
	}
}

// publishWoken commits n transactions of one step on key and one event
// each with this release's writer, waking the workers of other processes.
func publishWoken(t *testing.T, ctx context.Context, schema, key string, n int, pub *published) {
	var routes relayer.Routes
	must(t, relayer.AddType[Step](&routes, relayer.Route{Transport: "file", Destination: "steps", Ordered: true}))
	must(t, relayer.AddType[Event](&routes, relayer.Route{Transport: "file", Destination: "events"}))
	db, err := sql.Open("pgx", testdb.URL(t))
	must(t, err)
	defer db.Close()
	writer, err := enlist.NewWriter(relayer.Outbox{Schema: schema, Routes: &routes}, enlist.Options{Wake: db})
	must(t, err)
	for i := range n {
		step := relayer.NewOutgoing(Step{Key: key, Seq: i + 1}, relayer.Key(key))
		event := relayer.NewOutgoing(Event{Seq: i + 1})
		step.ID, event.ID = uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
		must(t, writer.RunInTx(ctx, db, nil, func(tx *enlist.Tx) error { return tx.PublishAll(ctx, step, event) }))
		pub.add(key, step.ID)
		pub.add("", event.ID)
		time.Sleep(20 * time.Millisecond)
	}
}

// checkArrivals checks that every published message arrived, and each
// key's first arrivals in its commit order.
func checkArrivals(t *testing.T, path string, pub *published, refusedKeys []string) {
	b, err := os.ReadFile(path)
	must(t, err)
	first := map[uuid.UUID]int{}
	duplicates := 0
	for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		fields := strings.SplitN(line, " ", 3)
		if len(fields) != 3 {
			t.Fatalf("arrivals line %d: %q", i+1, line)
		}
		id, err := uuid.Parse(fields[0])
		if err != nil {
			t.Fatalf("arrivals line %d: %v", i+1, err)
		}
		if fields[1] != "" {
			var s Step
			if err := json.Unmarshal([]byte(fields[2]), &s); err != nil || s.Key != fields[1] {
				t.Fatalf("arrivals line %d: body %s for key %q: %v", i+1, fields[2], fields[1], err)
			}
		}
		if _, ok := first[id]; ok {
			duplicates++
			continue
		}
		first[id] = i
	}
	lost := 0
	for id := range pub.ids {
		if _, ok := first[id]; !ok {
			lost++
		}
	}
	var violations []string
	for key, ids := range pub.byKey {
		last := -1
		for i, id := range ids {
			pos, ok := first[id]
			if !ok {
				continue
			}
			if pos < last {
				violations = append(violations, fmt.Sprintf("%s#%d", key, i+1))
			}
			last = max(last, pos)
		}
	}
	slices.Sort(violations)
	released := 0
	for _, key := range refusedKeys {
		released += len(pub.byKey[key])
	}
	t.Logf("%d messages committed (%d on the %d parked and released keys), %d arrivals, %d duplicates, %d lost, %d first arrivals out of their key's order",
		len(pub.ids), released, len(refusedKeys), len(first)+duplicates, duplicates, lost, len(violations))
	if lost > 0 {
		t.Errorf("%d committed messages never arrived", lost)
	}
	if len(violations) > 0 {
		t.Errorf("first arrivals out of their key's commit order: %v", violations)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
