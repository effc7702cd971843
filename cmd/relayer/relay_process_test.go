package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
)

// relayProcess is "relayer run" in a process of its own: this test binary
// run as the command.
type relayProcess struct {
	name   string
	cmd    *exec.Cmd
	stderr *lockedBuffer
	exited chan struct{}
	err    error // Wait's, once exited is closed
}

// startRelayProcess starts "relayer run args…" and waits until it
// delivers.
func startRelayProcess(t *testing.T, name string, args ...string) *relayProcess {
	t.Helper()
	p := &relayProcess{name: name, stderr: new(lockedBuffer), exited: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], append([]string{"run", "--name", name}, args...)...)
	p.cmd.Env = append(os.Environ(), asCommandEnv+"=1")
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { p.kill() })
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(p.stderr.String(), "relayer run: delivering") {
		select {
		case <-p.exited:
			t.Fatalf("relay %s exited at start (%v): %s", name, p.err, p.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("relay %s did not start: %s", name, p.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
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
		startRelayProcess(t, "relay-a", args...),
		startRelayProcess(t, "relay-b", args...),
		startRelayProcess(t, "relay-c", args...),
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
			time.Sleep(15 * time.Millisecond)
		}
		produced <- nil
	}()

	// Meanwhile: a graceful stop, a crash and a second graceful stop, each
	// relay started again.
	time.Sleep(time.Second)
	relays[0].terminate(t)
	relays[0] = startRelayProcess(t, "relay-a", args...)
	time.Sleep(time.Second)
	relays[1].kill()
	relays[1] = startRelayProcess(t, "relay-b", args...)
	time.Sleep(time.Second)
	relays[2].terminate(t)
	relays[2] = startRelayProcess(t, "relay-c", args...)
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
	deadline := time.Now().Add(90 * time.Second)
	for len(placed) < txs || !allAt(seen, txs*4/keys) {
		if time.Now().After(deadline) {
			t.Fatalf("after %d deliveries: %d of %d placed, ordered progress %v; stderr:\n%s\n%s\n%s", total, len(placed), txs, seen,
				relays[0].stderr.String(), relays[1].stderr.String(), relays[2].stderr.String())
		}
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

// dbProxy forwards TCP connections to the database and can cut them, so
// that a test sees the database go away and come back.
type dbProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  []net.Conn
}

func startDBProxy(t *testing.T, target string) *dbProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dbProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.setDown(true) })
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

func (p *dbProxy) forward(c net.Conn) {
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
	p.conns = append(p.conns, c, up)
	p.mu.Unlock()
	go func() { _, _ = io.Copy(up, c); up.Close() }()
	_, _ = io.Copy(c, up)
	c.Close()
}

// setDown cuts every connection and refuses new ones (true), or lets them
// through again (false).
func (p *dbProxy) setDown(down bool) {
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

// /readyz reports the relay unready while its database is unreachable,
// naming the check that fails, and ready again once it is back.
func TestRunReadinessFollowsTheDatabase(t *testing.T) {
	t.Parallel()
	dbURL, schema := migrated(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startDBProxy(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	natsURL := startNATSServer(t)
	rr := startRelay(t, "--database-url", u.String(), "--schema", schema, "--transport", "events="+natsURL, "--http", "127.0.0.1:0")
	readiness := func() (int, string) {
		resp, err := http.Get(rr.base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor := func(want int, contains string) {
		t.Helper()
		var code int
		var body string
		for deadline := time.Now().Add(45 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if code, body = readiness(); code == want && strings.Contains(body, contains) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz: %d %s; want %d with %q", code, body, want, contains)
			}
		}
	}
	waitFor(http.StatusOK, `"ready":true`)
	proxy.setDown(true)
	waitFor(http.StatusServiceUnavailable, `{"name":"database","ok":false`)
	if code, _ := get(t, "", rr.base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while the database is down: %d, want 200 (the process is alive)", code)
	}
	proxy.setDown(false)
	waitFor(http.StatusOK, `"ready":true`)
	rr.stop(t)
}
