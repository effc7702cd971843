package relay

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/testkit/syncbuf"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
)

// relayProcess is "relayer run" in a process of its own: this test binary
// run as the command.
type relayProcess struct {
	name   string
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer
	exited chan struct{}
	err    error // Wait's, once exited is closed
}

// startRelayProcess starts "relayer run args…" and waits until it
// delivers.
func startRelayProcess(t *testing.T, name string, env []string, args ...string) *relayProcess {
	t.Helper()
	p := &relayProcess{name: name, stderr: new(syncbuf.Buffer), exited: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], append([]string{"run", "--name", name}, args...)...)
	p.cmd.Env = append(append(os.Environ(), asCommandEnv+"=1"), env...)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { p.kill() })
	testkit.Eventually(t, 60*time.Second, func() bool {
		select {
		case <-p.exited:
			t.Fatalf("relay %s exited at start (%v): %s", name, p.err, p.stderr.String())
		default:
		}
		return strings.Contains(p.stderr.String(), "relayer run: delivering")
	}, "relay %s to start: %s", name, p.stderr)
	return p
}

// terminate sends SIGTERM and checks that the relay exits 0 in time.
func (p *relayProcess) terminate(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
		if p.err != nil {
			t.Errorf("relay %s after SIGTERM: %v; stderr %s", p.name, p.err, p.stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("relay %s did not stop after SIGTERM", p.name)
	}
}

// kill kills the relay with SIGKILL, as a crash would.
func (p *relayProcess) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// Several relays share one outbox while a producer writes: every committed
// message arrives, each key's messages in order, through SIGTERM, kill -9
// and restarts of the relays.
func TestRelayProcessesDeliverThroughStopsAndCrashes(t *testing.T) {
	t.Parallel()
	dbURL, schema := migrated(t)
	db := testdb.Open(t, "pgx")
	natsURL := startNATSServer(t)
	js := natsStream(t, natsURL, "PROC", "proc.>")
	args := []string{"--database-url", dbURL, "--schema", schema, "--lanes", "16", "--transport", "events=" + natsURL + "?stream=PROC",
		"--shutdown-timeout", "20s"}
	relays := []*relayProcess{
		startRelayProcess(t, "relay-a", nil, args...),
		startRelayProcess(t, "relay-b", nil, args...),
		startRelayProcess(t, "relay-c", nil, args...),
	}
	w := relayWriter(t, db, schema, 16, func(r *relayer.Routes) error {
		if err := relayer.AddType[relayPlaced](r, relayer.Route{Transport: "events", Destination: "proc.placed"}); err != nil {
			return err
		}
		return relayer.AddType[relayActivity](r, relayer.Route{Transport: "events", Destination: "proc.activity", Ordered: true})
	})

	// The producer: 400 transactions of one unordered message and four
	// ordered ones, over 40 keys, each key's seq counting up.
	const txs, keys = 400, 40
	seqs := make([]int, keys)
	produced := make(chan error, 1)
	var committed atomic.Int64
	go func() {
		for i := range txs {
			var msgs []relayer.Outgoing
			msgs = append(msgs, relayer.NewOutgoing(relayPlaced{i}))
			for j := range 4 {
				k := (i*4 + j) % keys
				msgs = append(msgs, relayer.NewOutgoing(relayActivity{seqs[k]}, relayer.Key(fmt.Sprintf("key-%02d", k))))
				seqs[k]++
			}
			if err := w.RunInTx(context.Background(), db, nil, func(tx *enlist.Tx) error { return tx.PublishAll(context.Background(), msgs...) }); err != nil {
				produced <- err
				return
			}
			committed.Add(1)
			time.Sleep(15 * time.Millisecond) // the producer's pace
		}
		produced <- nil
	}()

	// Meanwhile: a graceful stop, a crash and a second graceful stop, each
	// relay started again, once a quarter, a half and three quarters of the
	// transactions committed.
	writing := func(n int64) {
		t.Helper()
		testkit.Eventually(t, 60*time.Second, func() bool {
			if committed.Load() >= n {
				return true
			}
			select {
			case err := <-produced:
				if err != nil {
					t.Fatal(err)
				}
				produced <- nil // all committed, for the wait below
				return true
			default:
				return false
			}
		}, "the producer to commit %d of %d transactions", n, txs)
	}
	writing(txs / 4)
	relays[0].terminate(t)
	relays[0] = startRelayProcess(t, "relay-a", nil, args...)
	writing(txs / 2)
	relays[1].kill()
	relays[1] = startRelayProcess(t, "relay-b", nil, args...)
	writing(txs * 3 / 4)
	relays[2].terminate(t)
	relays[2] = startRelayProcess(t, "relay-c", nil, args...)
	if err := <-produced; err != nil {
		t.Fatal(err)
	}

	// Every message arrives; each key's first deliveries come in order (a
	// message sent again after a crash repeats one seen before).
	cons, err := js.OrderedConsumer(t.Context(), "PROC", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	placed := map[int]bool{}
	seen := make([]int, keys) // per key, the next seq expected for the first time
	total, dups := 0, 0
	if !testkit.Within(90*time.Second, func() bool {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			total++
			var key string
			if vs := m.Headers()[relayer.HeaderKey]; len(vs) > 0 {
				key = vs[len(vs)-1]
			}
			if m.Subject() == "proc.placed" {
				var p relayPlaced
				if err := json.Unmarshal(m.Data(), &p); err != nil {
					t.Fatal(err)
				}
				placed[p.N] = true
				continue
			}
			var a relayActivity
			if err := json.Unmarshal(m.Data(), &a); err != nil {
				t.Fatal(err)
			}
			var k int
			if _, err := fmt.Sscanf(key, "key-%d", &k); err != nil {
				t.Fatalf("an ordered message with key %q", key)
			}
			switch {
			case a.Seq == seen[k]:
				seen[k]++
			case a.Seq < seen[k]:
				dups++
			default:
				t.Fatalf("key %s: seq %d arrived before %d", key, a.Seq, seen[k])
			}
		}
		return len(placed) >= txs && allAt(seen, txs*4/keys)
	}) {
		t.Fatalf("after %d deliveries: %d of %d placed, ordered progress %v; stderr:\n%s\n%s\n%s", total, len(placed), txs, seen,
			relays[0].stderr.String(), relays[1].stderr.String(), relays[2].stderr.String())
	}
	t.Logf("%d deliveries: %d placed, %d ordered, %d sent again", total, len(placed), txs*4, dups)
	for _, r := range relays {
		r.terminate(t)
	}
}

func allAt(seen []int, n int) bool {
	for _, s := range seen {
		if s != n {
			return false
		}
	}
	return true
}

// tcpProxy forwards TCP connections to a server (the database, a broker)
// and can cut them or stall them, so that a test sees the server go away,
// or stop answering, and come back.
type tcpProxy struct {
	ln      net.Listener
	target  string
	mu      sync.Mutex
	down    bool
	stalled bool
	conns   []net.Conn
}

func startProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.setStalled(false); p.setDown(true) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.forward(c)
		}
	}()
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) forward(c net.Conn) {
	p.mu.Lock()
	if p.down {
		p.mu.Unlock()
		c.Close()
		return
	}
	p.mu.Unlock()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.down { // cut while this one was dialled
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns = append(p.conns, c, up)
	p.mu.Unlock()
	go p.pipe(up, c)
	p.pipe(c, up)
}

// pipe copies src to dst, holding the bytes back while the proxy is
// stalled, until either side closes.
func (p *tcpProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		for p.isStalled() {
			time.Sleep(10 * time.Millisecond)
		}
		n, err := src.Read(buf)
		if n > 0 {
			for p.isStalled() {
				time.Sleep(10 * time.Millisecond)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *tcpProxy) isStalled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stalled
}

// setStalled holds every byte back, the connections staying open (true),
// or lets them through again (false).
func (p *tcpProxy) setStalled(stalled bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = stalled
}

// setDown cuts every connection and refuses new ones (true), or lets them
// through again (false).
func (p *tcpProxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}

// A relay whose send hangs (its broker stopped answering) waits for it at
// SIGTERM up to --shutdown-timeout, then exits 1; a second signal exits at
// once. The message it held is delivered by the next relay.
func TestRelayStopsWithinItsDeadline(t *testing.T) {
	t.Parallel()
	dbURL, schema := migrated(t)
	db := testdb.Open(t, "pgx")
	natsURL := startNATSServer(t)
	js := natsStream(t, natsURL, "HUNG", "hung.>")
	u, err := url.Parse(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, u.Host)
	w := relayWriter(t, db, schema, relayer.LanesDefault, func(r *relayer.Routes) error {
		return relayer.AddType[relayPlaced](r, relayer.Route{Transport: "events", Destination: "hung.placed"})
	})
	// Claims (which bound a send) longer than the test's waits for the
	// hung relays, and a recovery lease short enough for the next relay to
	// take over soon after they are gone.
	relayEnv := []string{"RELAYER_RECOVERY_CLAIM_DURATION=60s", "RELAYER_RECOVERY_LEASE_DURATION=3s"}
	hang := func(timeout string) *relayProcess {
		t.Helper()
		p := startRelayProcess(t, "relay-hung", relayEnv, "--database-url", dbURL, "--schema", schema, "--transport", "events=nats://"+proxy.addr(),
			"--shutdown-timeout", timeout)
		proxy.setStalled(true)
		if err := w.RunInTx(t.Context(), db, nil, func(tx *enlist.Tx) error { return tx.Publish(t.Context(), relayPlaced{1}) }); err != nil {
			t.Fatal(err)
		}
		// The relay takes the row (its take holds it locked) and sends it,
		// and the send hangs.
		waitTaken(t, db, schema)
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		return p
	}
	exited := func(p *relayProcess, within time.Duration) bool {
		select {
		case <-p.exited:
			return true
		case <-time.After(within):
			return false
		}
	}

	// The deadline cuts the stop short.
	p := hang("2s")
	start := time.Now()
	if !exited(p, 20*time.Second) {
		t.Fatalf("the relay did not exit after its 2 s deadline: %s", p.stderr.String())
	}
	if code := p.cmd.ProcessState.ExitCode(); code != command.ExitFail || !strings.Contains(p.stderr.String(), "did not finish within --shutdown-timeout") {
		t.Errorf("after the deadline (%s): exit code %d, stderr %s", time.Since(start), code, p.stderr.String())
	}
	proxy.setStalled(false)

	// The first signal waits for the send up to the deadline, past the
	// 10 s a Runner whose context ended would give it; a second signal
	// ends the wait at once.
	p = hang("60s")
	if exited(p, 12*time.Second) {
		t.Fatalf("the relay exited within 12 s of the first signal although its send hangs and its deadline is 60 s: %s", p.stderr.String())
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !exited(p, 10*time.Second) {
		t.Fatalf("the relay did not exit at the second signal: %s", p.stderr.String())
	}
	if code := p.cmd.ProcessState.ExitCode(); code != command.ExitFail || !strings.Contains(p.stderr.String(), "again: exiting at once") {
		t.Errorf("after the second signal: exit code %d, stderr %s", code, p.stderr.String())
	}
	proxy.setStalled(false)

	// Nothing was lost: the next relay delivers both messages.
	next := startRelayProcess(t, "relay-next", relayEnv, "--database-url", dbURL, "--schema", schema, "--transport", "events="+natsURL)
	cons, err := js.OrderedConsumer(t.Context(), "HUNG", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var outbox int
	if !testkit.Within(45*time.Second, func() bool {
		return db.QueryRow(`SELECT count(*) FROM "`+schema+`".outbox`).Scan(&outbox) == nil && outbox == 0
	}) {
		t.Fatalf("%d rows still in the outbox; stderr %s", outbox, next.stderr.String())
	}
	if info, err := cons.Info(t.Context()); err != nil || info.NumPending+info.Delivered.Stream < 2 {
		t.Errorf("the stream holds fewer than the 2 messages written: %+v, %v", info, err)
	}
	next.terminate(t)
}

// /readyz reports the relay unready while its database is unreachable,
// naming the check that fails, and ready again once it is back.
func TestRunReadinessFollowsTheDatabase(t *testing.T) {
	t.Parallel()
	dbURL, schema := migrated(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, u.Host)
	u.Host = proxy.addr()
	natsURL := startNATSServer(t)
	rr := startRelay(t, "--database-url", u.String(), "--schema", schema, "--transport", "events="+natsURL, "--http", "127.0.0.1:0")
	rr.waitReadyz(t, 45*time.Second, http.StatusOK, `"ready":true`)
	proxy.setDown(true)
	rr.waitReadyz(t, 45*time.Second, http.StatusServiceUnavailable, `{"name":"database","ok":false`)
	if code, _ := get(t, "", rr.base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while the database is down: %d, want 200 (the process is alive)", code)
	}
	proxy.setDown(false)
	rr.waitReadyz(t, 45*time.Second, http.StatusOK, `"ready":true`)
	rr.stop(t)
}

// waitTaken waits until every row of the outbox in schema is locked: taken
// by a worker, whose transaction holds it while it sends.
func waitTaken(t *testing.T, db *sql.DB, schema string) {
	t.Helper()
	var free int
	if !testkit.Within(30*time.Second, func() bool {
		err := db.QueryRow(`SELECT count(*) FROM (SELECT 1 FROM "` + schema + `".outbox FOR UPDATE SKIP LOCKED) AS f`).Scan(&free)
		if err != nil {
			t.Fatal(err)
		}
		return free == 0
	}) {
		t.Fatalf("%d rows still not taken", free)
	}
}
