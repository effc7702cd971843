package bench

import (
	"context"
	"net"
	"net/url"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/relayer-go/relayer/internal/testkit/testdb"
)

func TestParseProcStat(t *testing.T) {
	for _, c := range []struct {
		line string
		want procStat
		ok   bool
	}{
		{"42 (postgres) S 7 42 42 0 -1 4194560 501 0 0 0 12 34 5 6 20 0 1 0 100 0 0", procStat{"postgres", 7, 12, 34, 5, 6}, true},
		// A command name may hold spaces and parentheses.
		{"9 (a b) c) R 1 9 9 0 -1 0 0 0 0 0 1 2 3 4 20 0 1 0 1 0 0", procStat{"a b) c", 1, 1, 2, 3, 4}, true},
		{"9 (short) R 1 9", procStat{}, false},
		{"9 no parentheses R 1 9 9 0 -1 0 0 0 0 0 1 2 3 4 20 0 1 0 1 0 0", procStat{}, false},
		{"9 (x) R 1 9 9 0 -1 0 0 0 0 0 one 2 3 4 20 0 1 0 1 0 0", procStat{}, false},
	} {
		got, ok := parseProcStat([]byte(c.line))
		if got != c.want || ok != c.ok {
			t.Errorf("parseProcStat(%q) = %+v, %v; want %+v, %v", c.line, got, ok, c.want, c.ok)
		}
	}
}

// The meter finds a server that runs on this machine, the test database's
// in every setting but a RELAYER_TEST_DATABASE_URL naming another host, and
// sees its CPU time grow while it works.
func TestCPUMeterReadsTheLocalServer(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the server's CPU is read from Linux's /proc")
	}
	if u, err := url.Parse(os.Getenv(testdb.EnvURL)); err == nil && u.Hostname() != "" {
		if ip := net.ParseIP(u.Hostname()); u.Hostname() != "localhost" && (ip == nil || !ip.IsLoopback()) {
			t.Skipf("the test database runs on %s, not on this machine", u.Hostname())
		}
	}
	ctx := context.Background()
	db := testdb.Open(t, "pgx")
	m := newCPUMeter(ctx, db)
	if m.postmaster == 0 {
		t.Fatal("the local test database's server was not found in /proc")
	}
	before := m.sample()
	deadline := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) {
		if _, err := db.ExecContext(ctx, `SELECT count(*) FROM generate_series(1, 200000)`); err != nil {
			t.Fatal(err)
		}
	}
	after := m.sample()
	if !before.serverOK || !after.serverOK || after.server-before.server < 50*time.Millisecond {
		t.Errorf("the server's CPU went from %s to %s over 200ms of queries", before.server, after.server)
	}
	total, server := after.per(before, 2)
	if server != (after.server-before.server)/2 || total < server {
		t.Errorf("per = %s, %s; want the server's half and this process's on top", total, server)
	}
}
