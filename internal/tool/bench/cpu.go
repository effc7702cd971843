package bench

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"strconv"
	"time"

	"github.com/relayer-go/relayer/internal/tool/proccpu"
)

// CPU per transaction or message. On a machine whose cores the producers share with
// the database, throughput moves with whatever else runs there, while the
// CPU each transaction costs hardly does. A run therefore also reads the
// CPU time its own process spent (the producers, the contender's client
// code, the garbage collector) and, when the database server runs on the
// same machine and its processes can be read in /proc, the server's: the
// postmaster's, its live children's (backends, autovacuum, the WAL
// writer), and that of the children it reaped, such as the backends of
// closed connections. Whatever else the same server runs meanwhile counts
// too, so run on a server nothing else uses.

// procTick is the unit of the CPU times in /proc/PID/stat (USER_HZ, 100 on
// every architecture Linux exposes through /proc).
const procTick = 10 * time.Millisecond

// cpuMeter reads the CPU time of the benchmark's process and of the local
// database server.
type cpuMeter struct {
	// postmaster is the server's main process id, 0 when its processes
	// cannot be read.
	postmaster int
}

// newCPUMeter finds the server behind db in /proc: the parent of the
// backend serving one connection, both named postgres. A server elsewhere
// (another machine, a container), or a system without /proc, leaves only
// the process's own CPU measured.
func newCPUMeter(ctx context.Context, db *sql.DB) cpuMeter {
	var backend int
	if err := db.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		return cpuMeter{}
	}
	st, ok := readProcStat(backend)
	if !ok || st.comm != "postgres" {
		return cpuMeter{}
	}
	parent, ok := readProcStat(st.ppid)
	if !ok || parent.comm != "postgres" {
		return cpuMeter{}
	}
	return cpuMeter{postmaster: st.ppid}
}

// cpuSample is the CPU time spent up to one moment.
type cpuSample struct {
	self, server time.Duration
	serverOK     bool
}

// sample reads the CPU time spent so far by this process and, when the
// meter found it, by the database server.
func (m cpuMeter) sample() cpuSample {
	s := cpuSample{self: proccpu.Self()}
	if m.postmaster == 0 {
		return s
	}
	// A backend that exits is counted in the server's children's times once
	// the server reaps it. One reaped while the backends are read would be
	// counted twice or not at all, so a sample is taken again until the
	// children's times stay the same across it.
	for range 5 {
		first, ok := readProcStat(m.postmaster)
		if !ok {
			return s
		}
		ticks, ok := m.backendTicks()
		if !ok {
			return s
		}
		last, ok := readProcStat(m.postmaster)
		if !ok {
			return s
		}
		if first.cutime+first.cstime == last.cutime+last.cstime {
			ticks += last.utime + last.stime + last.cutime + last.cstime
			s.server, s.serverOK = time.Duration(ticks)*procTick, true
			return s
		}
	}
	return s
}

// backendTicks adds up the CPU ticks of the server's live children.
func (m cpuMeter) backendTicks() (int64, bool) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, false
	}
	var ticks int64
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == m.postmaster {
			continue
		}
		if st, ok := readProcStat(pid); ok && st.ppid == m.postmaster {
			ticks += st.utime + st.stime
		}
	}
	return ticks, true
}

// per returns the CPU spent from before to s per one of n (transactions,
// messages), and the database server's part of it (zero when either sample
// lacks it).
func (s cpuSample) per(before cpuSample, n int64) (total, server time.Duration) {
	if n <= 0 {
		return 0, 0
	}
	if s.serverOK && before.serverOK {
		server = (s.server - before.server) / time.Duration(n)
	}
	return (s.self-before.self)/time.Duration(n) + server, server
}

// procStat is what a sample needs of /proc/PID/stat.
type procStat struct {
	comm                         string
	ppid                         int
	utime, stime, cutime, cstime int64
}

// readProcStat reads /proc/pid/stat; ok is false when the process is gone
// or the file unreadable.
func readProcStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	return parseProcStat(b)
}

// parseProcStat parses the text of /proc/PID/stat: "pid (comm) state ppid
// …", utime, stime, cutime and cstime being the 14th to 17th fields. The
// command name may hold spaces and parentheses, so the fields after it are
// split from its last ')'.
func parseProcStat(b []byte) (procStat, bool) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return procStat{}, false
	}
	fields := bytes.Fields(b[end+1:]) // from the 3rd field, state
	if len(fields) < 15 {
		return procStat{}, false
	}
	num := func(i int) int64 { // the i-th field, counted from 1
		n, err := strconv.ParseInt(string(fields[i-3]), 10, 64)
		if err != nil {
			return -1
		}
		return n
	}
	st := procStat{comm: string(b[open+1 : end]), ppid: int(num(4)),
		utime: num(14), stime: num(15), cutime: num(16), cstime: num(17)}
	if st.ppid < 0 || st.utime < 0 || st.stime < 0 || st.cutime < 0 || st.cstime < 0 {
		return procStat{}, false
	}
	return st, true
}
