package faults

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// proxy forwards TCP connections to a PostgreSQL server, reading the
// client's protocol messages as they pass. It can lose the reply to a
// COMMIT that ends a transaction which deleted rows (a worker's take): the
// server commits, and the client sees its connection drop instead of the
// answer. It can also freeze: every connection stays open and nothing moves
// either way until it thaws.
type proxy struct {
	ln     net.Listener
	target string

	// cut is how many take commits' replies are still to be lost.
	cut  atomic.Int64
	lost atomic.Int64

	mu     sync.Mutex
	frozen bool
	thawed *sync.Cond
	conns  map[net.Conn]bool
	closed bool
	wg     sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.thawed = sync.NewCond(&p.mu)
	p.wg.Go(p.serve)
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.handle(c) })
	}
}

// freeze stops every byte until thaw.
func (p *proxy) freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
}

func (p *proxy) thaw() {
	p.mu.Lock()
	p.frozen = false
	p.thawed.Broadcast()
	p.mu.Unlock()
}

// wait blocks while the proxy is frozen.
func (p *proxy) wait() {
	p.mu.Lock()
	for p.frozen && !p.closed {
		p.thawed.Wait()
	}
	p.mu.Unlock()
}

func (p *proxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add && p.closed {
		return false
	}
	if add {
		p.conns[c] = true
	} else {
		delete(p.conns, c)
	}
	return true
}

// close stops accepting, cuts every connection and waits for the
// forwarding goroutines.
func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	p.thawed.Broadcast()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// handle forwards one client connection.
func (p *proxy) handle(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(client, true) || !p.track(server, true) {
		client.Close()
		server.Close()
		return
	}
	defer func() {
		client.Close()
		server.Close()
		p.track(client, false)
		p.track(server, false)
	}()
	// cutting is set when the client sent a take's COMMIT whose reply is to
	// be lost: the server-to-client side then drops the connection at the
	// server's next ReadyForQuery, without passing on the answer.
	var cutting atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.serverToClient(server, client, &cutting)
		client.Close()
		server.Close()
	}()
	p.clientToServer(client, server, &cutting)
	client.Close()
	server.Close()
	<-done
}

// clientToServer forwards the client's messages: the startup message (no
// type byte), then typed messages.
func (p *proxy) clientToServer(client, server net.Conn, cutting *atomic.Bool) {
	var head [4]byte
	if _, err := io.ReadFull(client, head[:]); err != nil {
		return
	}
	n := int(binary.BigEndian.Uint32(head[:]))
	if n < 4 || n > 1<<20 {
		return
	}
	startup := make([]byte, n)
	copy(startup, head[:])
	if _, err := io.ReadFull(client, startup[4:]); err != nil {
		return
	}
	p.wait()
	if _, err := server.Write(startup); err != nil {
		return
	}
	deleted := false              // the transaction going on deleted rows
	deleting := map[string]bool{} // prepared statements that delete rows
	for {
		msg, err := readMessage(client)
		if err != nil {
			return
		}
		if msg[0] == 'P' { // Parse: statement name, query
			if name, rest, ok := bytes.Cut(msg[5:], []byte{0}); ok {
				deleting[string(name)] = bytes.Contains(bytes.ToLower(rest), []byte("delete from"))
			}
		}
		if msg[0] == 'B' { // Bind: portal name, statement name
			if _, rest, ok := bytes.Cut(msg[5:], []byte{0}); ok {
				if name, _, ok := bytes.Cut(rest, []byte{0}); ok && deleting[string(name)] {
					deleted = true
				}
			}
		}
		if msg[0] == 'Q' || msg[0] == 'P' {
			q := bytes.ToLower(msg[5:])
			if msg[0] == 'Q' && bytes.Contains(q, []byte("delete from")) {
				deleted = true
			}
			if isCommit(msg) {
				if deleted && p.cut.Add(-1) >= 0 {
					cutting.Store(true)
				}
				deleted = false
			}
			if bytes.Contains(q, []byte("rollback")) {
				deleted = false
			}
		}
		p.wait()
		if _, err := server.Write(msg); err != nil {
			return
		}
	}
}

// serverToClient forwards the server's messages, dropping the connection
// instead of the ReadyForQuery that answers a COMMIT being cut.
func (p *proxy) serverToClient(server, client net.Conn, cutting *atomic.Bool) {
	for {
		msg, err := readMessage(server)
		if err != nil {
			return
		}
		if msg[0] == 'Z' && cutting.Load() {
			p.lost.Add(1)
			return // the commit took effect; its answer goes nowhere
		}
		p.wait()
		if _, err := client.Write(msg); err != nil {
			return
		}
	}
}

// isCommit reports whether a Query or Parse message is a COMMIT.
func isCommit(msg []byte) bool {
	body := msg[5:]
	if msg[0] == 'P' { // statement name, then the query
		i := bytes.IndexByte(body, 0)
		if i < 0 {
			return false
		}
		body = body[i+1:]
	}
	if i := bytes.IndexByte(body, 0); i >= 0 {
		body = body[:i]
	}
	q := bytes.TrimRight(bytes.TrimSpace(bytes.ToLower(body)), ";")
	return bytes.Equal(q, []byte("commit")) || bytes.Equal(q, []byte("end"))
}

var errMessageTooLong = errors.New("protocol message too long")

// readMessage reads one typed protocol message: its type byte, length and
// body.
func readMessage(r io.Reader) ([]byte, error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(head[1:]))
	if n < 4 || n > 1<<30 {
		return nil, errMessageTooLong
	}
	msg := make([]byte, 1+n)
	copy(msg, head[:])
	_, err := io.ReadFull(r, msg[5:])
	return msg, err
}
