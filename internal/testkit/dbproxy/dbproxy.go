// Package dbproxy stands between a test's clients and its database server
// as a TCP proxy that can take the server away: while down, the proxy's
// connections are cut and new ones refused, as when the server stops; up
// again, it forwards as before. Tests of what a client does through a
// database outage point their connection string at [Proxy.Addr].
package dbproxy

import (
	"database/sql"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// Proxy forwards TCP connections to a target address until it is taken
// down. It is safe for concurrent use.
type Proxy struct {
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener // nil while down
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

// New starts a proxy to target on a free loopback port; it is closed when
// the test ends.
func New(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("dbproxy: %v", err)
	}
	p := &Proxy{target: target, addr: ln.Addr().String(), conns: map[net.Conn]bool{}}
	p.serve(ln)
	tb.Cleanup(func() {
		p.Down()
		p.wg.Wait()
	})
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.addr }

// Down cuts every connection and refuses new ones (the port is closed)
// until Up.
func (p *Proxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
}

// Up listens again on the proxy's address and forwards new connections.
func (p *Proxy) Up(tb testing.TB) {
	tb.Helper()
	p.mu.Lock()
	up := p.ln != nil
	p.mu.Unlock()
	if up {
		return
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		tb.Fatalf("dbproxy: listening again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.forward(c) })
		}
	})
}

// forward copies bytes both ways between c and a new connection to the
// target until either side closes or the proxy goes down.
func (p *Proxy) forward(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(c, s) {
		return
	}
	defer p.untrack(c, s)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(s, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, s); done <- struct{}{} }()
	<-done
	c.Close()
	s.Close()
	<-done
}

// track records a pair of connections, or closes them when the proxy went
// down meanwhile.
func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = true
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

// Open starts a proxy to the PostgreSQL server of url (a pgx connection
// string reaching it over TCP) and opens a database/sql pool, with pgx's
// driver, through it; both are closed when the test ends. Connections time
// out after 2 s, so that a client sees the proxy down promptly.
func Open(tb testing.TB, url string) (*Proxy, *sql.DB) {
	tb.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		tb.Fatalf("dbproxy: %v", err)
	}
	if strings.HasPrefix(cfg.Host, "/") {
		tb.Fatalf("dbproxy: the database is reached through a socket (%s); the proxy forwards TCP", cfg.Host)
	}
	p := New(tb, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	host, port, err := net.SplitHostPort(p.Addr())
	if err != nil {
		tb.Fatalf("dbproxy: %v", err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		tb.Fatalf("dbproxy: %v", err)
	}
	cfg.Host, cfg.Port = host, uint16(n)
	cfg.ConnectTimeout = 2 * time.Second
	db := stdlib.OpenDB(*cfg)
	tb.Cleanup(func() { db.Close() })
	return p, db
}
