package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
)

// Workers in processes of their own: the test binary runs itself again as a
// worker (TestWorkerProcess, selected by the environment variable below),
// and the worker sends to the scenario's broker over TCP. The scenario can
// then kill a worker with SIGKILL, leaving the server to notice its
// connections are gone, and freeze one with SIGSTOP, the whole process with
// every goroutine and timer, past its leases.

// workerProcessEnv carries a worker process's configuration, as JSON.
const workerProcessEnv = "RELAYER_FAULTS_WORKER"

// processConfig is what a worker process needs.
type processConfig struct {
	URL    string `json:"url"`
	Schema string `json:"schema"`
	Name   string `json:"name"`
	Broker string `json:"broker"` // the broker's TCP address
}

// TestWorkerProcess is a worker process's body; it is skipped in a normal
// run. It runs a Runner like the in-process workers' until it is killed or
// sent SIGTERM.
func TestWorkerProcess(t *testing.T) {
	raw := os.Getenv(workerProcessEnv)
	if raw == "" {
		t.Skip("runs only as a worker process of a fault scenario")
	}
	var cfg processConfig
	must(t, json.Unmarshal([]byte(raw), &cfg))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	s := &system{t: t, schema: cfg.Schema, url: cfg.URL}
	outbox := scenarioOutbox(t, cfg.Schema, &remoteBroker{addr: cfg.Broker, name: cfg.Name})
	db := s.open(t, "worker-"+cfg.Name)
	r, err := dispatch.NewRunner(db, outbox, workerOptions(cfg.Name))
	must(t, err)
	for attempt := 1; ; attempt++ {
		if err = r.Start(ctx); err == nil {
			break
		}
		if attempt == 50 {
			t.Fatalf("start: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Println("started") // the parent waits for this line
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r.Stop(sctx)
}

// sendRequest is one send of a worker process: the messages of one batch,
// and when the worker began sending them (wall clock, shared by the
// processes of one machine).
type sendRequest struct {
	Worker string         `json:"worker"`
	Start  int64          `json:"start"`
	Msgs   []remoteMesage `json:"msgs"`
}

type remoteMesage struct {
	ID      uuid.UUID `json:"id"`
	Key     string    `json:"key"`
	Lane    int       `json:"lane"`
	Ordered bool      `json:"ordered"`
}

// remoteBroker is a worker process's transport: each send is a request to
// the scenario's broker, answered once recorded. A send whose context has
// ended is not made.
type remoteBroker struct {
	addr, name string
	mu         sync.Mutex
	conn       net.Conn
	r          *bufio.Reader
}

func (b *remoteBroker) Capabilities(context.Context, string) (relayer.Capabilities, error) {
	return relayer.Capabilities{MaxBatchSize: 100, OrderedByKey: true}, nil
}

func (b *remoteBroker) Send(ctx context.Context, m *relayer.Message) error {
	return b.SendBatch(ctx, []*relayer.Message{m})
}

func (b *remoteBroker) SendBatch(ctx context.Context, ms []*relayer.Message) error {
	req := sendRequest{Worker: b.name, Start: time.Now().UnixNano()}
	for _, m := range ms {
		req.Msgs = append(req.Msgs, remoteMesage{ID: m.ID, Key: m.Key, Lane: m.Lane, Ordered: m.Ordered})
	}
	line, err := json.Marshal(req)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.conn == nil {
		var d net.Dialer
		if b.conn, err = d.DialContext(ctx, "tcp", b.addr); err != nil {
			b.conn = nil
			return fmt.Errorf("broker: %w: %w", relayer.ErrUnavailable, err)
		}
		b.r = bufio.NewReader(b.conn)
	}
	if dl, ok := ctx.Deadline(); ok {
		b.conn.SetDeadline(dl)
	} else {
		b.conn.SetDeadline(time.Time{})
	}
	if _, err = b.conn.Write(append(line, '\n')); err == nil {
		var reply string
		if reply, err = b.r.ReadString('\n'); err == nil && reply != "ok\n" {
			err = errors.New("broker: " + reply)
		}
	}
	if err != nil {
		b.conn.Close()
		b.conn = nil
	}
	return err
}

// serveProcesses runs the broker's TCP side for worker processes until the
// test ends, and returns its address. Each request's messages are recorded
// as delivered at its arrival, with its send's start, so that lane overlaps
// are counted from the arrival log.
func (s *system) serveProcesses(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadBytes('\n')
					if err != nil {
						return
					}
					var req sendRequest
					if err := json.Unmarshal(line, &req); err != nil {
						c.Write([]byte("bad request\n"))
						return
					}
					s.broker.arrive(req)
					if _, err := c.Write([]byte("ok\n")); err != nil {
						return
					}
				}
			})
		}
	})
	return ln.Addr().String()
}

// arrive records a worker process's send, and counts an overlap for each
// lane another worker's send of which was in flight (begun and not yet
// arrived) at the same time.
func (b *broker) arrive(req sendRequest) {
	now := time.Now()
	start := time.Unix(0, req.Start)
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range req.Msgs {
		if m.Ordered {
			for _, other := range b.remoteSends {
				if other.worker != req.Worker && other.lane == m.Lane && other.start.Before(now) && start.Before(other.arrived) {
					b.overlaps++
				}
			}
		}
		b.deliveries = append(b.deliveries, delivery{id: m.ID, key: m.Key, ordered: m.Ordered, lane: m.Lane, at: now})
	}
	lanes := map[int]bool{}
	for _, m := range req.Msgs {
		if m.Ordered && !lanes[m.Lane] {
			lanes[m.Lane] = true
			b.remoteSends = append(b.remoteSends, remoteSend{worker: req.Worker, lane: m.Lane, start: start, arrived: now})
		}
	}
}

// remoteSend is an ordered send of a worker process, from its start to its
// arrival.
type remoteSend struct {
	worker         string
	lane           int
	start, arrived time.Time
}

// process is a worker process.
type process struct {
	name    string
	cmd     *exec.Cmd
	done    chan struct{}
	stopped atomic.Bool // SIGSTOP sent, no SIGCONT yet
}

// startProcess starts a worker process and waits until it has joined.
func (s *system) startProcess(t *testing.T, broker string) *process {
	name := "p" + fmt.Sprint(s.next.Add(1))
	cfg, err := json.Marshal(processConfig{URL: s.url, Schema: s.schema, Name: name, Broker: broker})
	must(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^TestWorkerProcess$", "-test.v")
	cmd.Env = append(os.Environ(), workerProcessEnv+"="+string(cfg))
	out, err := cmd.StdoutPipe()
	must(t, err)
	cmd.Stderr = nil
	must(t, cmd.Start())
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	started := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "started" {
				close(started)
			}
		}
		cmd.Wait()
		close(p.done)
	}()
	select {
	case <-started:
	case <-p.done:
		t.Fatalf("worker process %s ended before it started", name)
	case <-time.After(60 * time.Second):
		t.Fatalf("worker process %s did not start within a minute", name)
	}
	return p
}

// end stops a worker process with SIGTERM (resuming it first if frozen) and
// waits for it; SIGKILL if it has not ended within 30 s.
func (p *process) end() {
	select {
	case <-p.done:
		return
	default:
	}
	if p.stopped.Load() {
		p.cmd.Process.Signal(syscall.SIGCONT)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// processFaults kills (SIGKILL) or freezes (SIGSTOP, past the lease, then
// SIGCONT) one of the scenario's worker processes every 0.5–1.5 s, starting
// a new one after each kill. Freezes overlap other faults; every frozen
// process is resumed before it returns.
func processFaults(ctx context.Context, s *system, stop <-chan struct{}) injection {
	var in injection
	var kills, freezes int
	var frozen sync.WaitGroup
	for {
		select {
		case <-stop:
			frozen.Wait()
			in.note = fmt.Sprintf("%d worker processes killed with SIGKILL, %d frozen with SIGSTOP for 3–8 s (past the 2 s lease)", kills, freezes)
			return in
		case <-time.After(500*time.Millisecond + rand.N(time.Second)):
		}
		live := slices.DeleteFunc(slices.Clone(s.procs), func(p *process) bool {
			select {
			case <-p.done:
				return true
			default:
				return p.stopped.Load()
			}
		})
		if len(live) <= 1 {
			s.procs = append(s.procs, s.startProcess(s.t, s.brokerAddr))
			continue
		}
		p := live[rand.IntN(len(live))]
		in.faults++
		if rand.IntN(2) == 0 {
			p.cmd.Process.Kill()
			<-p.done
			kills++
			s.procs = append(s.procs, s.startProcess(s.t, s.brokerAddr))
			continue
		}
		freezes++
		p.stopped.Store(true)
		p.cmd.Process.Signal(syscall.SIGSTOP)
		frozen.Go(func() {
			select {
			case <-time.After(3*time.Second + rand.N(5*time.Second)):
			case <-ctx.Done():
			}
			p.cmd.Process.Signal(syscall.SIGCONT)
			p.stopped.Store(false)
		})
	}
}

// startProcesses is a scenario's setup: its broker's TCP side and n worker
// processes, ended when the test ends.
func startProcesses(n int) func(t *testing.T, s *system) {
	return func(t *testing.T, s *system) {
		s.brokerAddr = s.serveProcesses(t)
		for range n {
			s.procs = append(s.procs, s.startProcess(t, s.brokerAddr))
		}
		t.Cleanup(s.endProcesses)
	}
}

// endProcesses ends every worker process.
func (s *system) endProcesses() {
	for _, p := range s.procs {
		p.end()
	}
}
