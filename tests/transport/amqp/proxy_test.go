package relayeramqp_test

import (
	"io"
	"net"
	"sync"
	"testing"
)

// relay forwards TCP connections to a broker until it is cut, which closes
// every connection it carries at once, as a broker that goes down or a
// network that fails would.
type relay struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	cut    bool
	wg     sync.WaitGroup
}

// startRelay listens on a free local port and forwards to target until the
// test ends or Cut is called.
func startRelay(t testing.TB, target string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, target: target}
	r.wg.Go(r.accept)
	t.Cleanup(r.Cut)
	return r
}

// Addr is the address to dial instead of the broker's.
func (r *relay) Addr() string { return r.ln.Addr().String() }

func (r *relay) accept() {
	for {
		in, err := r.ln.Accept()
		if err != nil {
			return // cut
		}
		out, err := net.Dial("tcp", r.target)
		if err != nil {
			in.Close()
			continue
		}
		if !r.track(in, out) {
			return
		}
		r.wg.Go(func() { pipe(out, in) })
		r.wg.Go(func() { pipe(in, out) })
	}
}

// track keeps in and out for Cut, or closes them when the relay is cut
// already.
func (r *relay) track(in, out net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cut {
		in.Close()
		out.Close()
		return false
	}
	r.conns = append(r.conns, in, out)
	return true
}

// pipe copies from src to dst until either fails, then closes both so that
// the other direction ends too.
func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// Cut closes the listener and every connection the relay carries, and
// waits for its goroutines. It is idempotent.
func (r *relay) Cut() {
	r.mu.Lock()
	r.cut = true
	conns := r.conns
	r.conns = nil
	r.mu.Unlock()
	r.ln.Close()
	for _, c := range conns {
		c.Close()
	}
	r.wg.Wait()
}
