package pgcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/relayer-go/relayer/internal/testkit"
)

// start starts a cluster for a test, skipping the test only when no server
// binaries can be had.
func start(t *testing.T, opts Options) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	began := time.Now()
	c, err := Start(ctx, opts)
	if errors.Is(err, ErrNoServer) {
		t.Skipf("cannot start a PostgreSQL cluster: %v", err)
	}
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("cluster started in %v", time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return c
}

// query runs one statement and returns the first column of its rows.
func query(t *testing.T, dbURL, sql string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connecting to %s: %v", dbURL, err)
	}
	defer conn.Close(context.Background())
	results, err := conn.Exec(ctx, sql).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	var col []string
	for _, r := range results {
		for _, row := range r.Rows {
			col = append(col, string(row[0]))
		}
	}
	return col
}

func TestStartStop(t *testing.T) {
	c := start(t, Options{Install: true, Settings: map[string]string{"work_mem": "8MB"}})

	u, err := url.Parse(c.URL())
	if err != nil {
		t.Fatalf("URL %q: %v", c.URL(), err)
	}
	if u.Scheme != "postgres" || u.User.Username() != "postgres" || u.Hostname() != "127.0.0.1" ||
		u.Path != "/postgres" || u.Query().Get("sslmode") != "disable" {
		t.Errorf("URL() = %q, want postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable", c.URL())
	}

	if got := query(t, c.URL(), "select 1"); len(got) != 1 || got[0] != "1" {
		t.Errorf("select 1 = %q", got)
	}
	for setting, want := range map[string]string{
		"fsync":              "off",
		"full_page_writes":   "off",
		"synchronous_commit": "on",
		"max_connections":    "200",
		"shared_buffers":     "128MB",
		"work_mem":           "8MB",
		"server_encoding":    "UTF8",
		"lc_collate":         "C",
		"listen_addresses":   "127.0.0.1",
	} {
		if got := query(t, c.URL(), "show "+setting); len(got) != 1 || got[0] != want {
			t.Errorf("show %s = %q, want %q", setting, got, want)
		}
	}
	if got := query(t, c.URL(), "select rolsuper from pg_roles where rolname = current_user"); len(got) != 1 || got[0] != "t" {
		t.Errorf("the URL's role is not a superuser: %q", got)
	}

	// The Unix socket in the cluster directory works too.
	socketURL := fmt.Sprintf("postgres://postgres@/postgres?host=%s&port=%s&sslmode=disable", c.dir, u.Port())
	if got := query(t, socketURL, "select 2"); len(got) != 1 || got[0] != "2" {
		t.Errorf("select 2 over the Unix socket = %q", got)
	}

	if os.Geteuid() == 0 {
		info, err := os.Stat(c.dataDir())
		if err != nil {
			t.Fatal(err)
		}
		if uid := info.Sys().(*syscall.Stat_t).Uid; uid == 0 {
			t.Errorf("the data directory belongs to root")
		}
	}

	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(c.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Stop, the cluster directory %s: %v, want it gone", c.dir, err)
	}
	if conn, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
		conn.Close()
		t.Errorf("after Stop, %s still accepts connections", u.Host)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestTwoClusters(t *testing.T) {
	a := start(t, Options{})
	b := start(t, Options{})
	if a.URL() == b.URL() || a.dir == b.dir {
		t.Fatalf("two clusters share a URL or directory: %s %s", a.URL(), b.URL())
	}
	query(t, a.URL(), "create table only_in_a (id int)")
	if got := query(t, b.URL(), "select count(*) from pg_class where relname = 'only_in_a'"); got[0] != "0" {
		t.Errorf("a table created in one cluster is visible in the other")
	}
}

func TestDirOption(t *testing.T) {
	parent, err := os.MkdirTemp("", "pgcluster-parent-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	if err := os.Chmod(parent, 0o755); err != nil { // traversable by the server's user
		t.Fatal(err)
	}
	c := start(t, Options{Dir: parent})
	if filepath.Dir(c.dir) != parent {
		t.Errorf("cluster directory %s is not under %s", c.dir, parent)
	}
	query(t, c.URL(), "select 1")
}

func TestPortCollision(t *testing.T) {
	// The first port handed out is taken by the time the server starts.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port
	saved := freePort
	calls := 0
	freePort = func() (int, error) {
		calls++
		if calls == 1 {
			return takenPort, nil
		}
		return saved()
	}
	t.Cleanup(func() { freePort = saved })

	c := start(t, Options{})
	if calls != 2 {
		t.Errorf("freePort called %d times, want 2", calls)
	}
	if strings.Contains(c.URL(), ":"+strconv.Itoa(takenPort)+"/") {
		t.Errorf("cluster uses the taken port: %s", c.URL())
	}
	query(t, c.URL(), "select 1")
}

func TestStopNil(t *testing.T) {
	var c *Cluster
	if err := c.Stop(); err != nil {
		t.Errorf("Stop on nil: %v", err)
	}
}

func TestManagedSettings(t *testing.T) {
	for _, name := range []string{"port", "Listen_Addresses"} {
		_, err := Start(context.Background(), Options{Settings: map[string]string{name: "1"}})
		if err == nil || !strings.Contains(err.Error(), "managed") {
			t.Errorf("Start with setting %s: %v, want an error", name, err)
		}
	}
}

func TestCanceledContext(t *testing.T) {
	parent, err := os.MkdirTemp("", "pgcluster-parent-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	os.Chmod(parent, 0o755)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c, err := Start(ctx, Options{Dir: parent})
	if err == nil {
		c.Stop()
		t.Fatal("Start with a canceled context succeeded")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Start with a canceled context: %v, want context.Canceled", err)
	}

	// Cancel while initdb or the server is starting.
	ctx, cancel = context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	c, err = Start(ctx, Options{Dir: parent})
	if errors.Is(err, ErrNoServer) {
		t.Skip(err)
	}
	if err == nil {
		c.Stop() // it was fast
	}
	entries, _ := os.ReadDir(parent)
	if len(entries) != 0 {
		t.Errorf("Start left %d entries behind in %s (err=%v)", len(entries), parent, err)
	}
}

func TestNoServerError(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	saved := debianRoot
	debianRoot = t.TempDir()
	t.Cleanup(func() { debianRoot = saved })
	_, err := Start(context.Background(), Options{})
	if !errors.Is(err, ErrNoServer) {
		t.Fatalf("Start without binaries: %v, want ErrNoServer", err)
	}
	for _, want := range []string{"apt-get install postgresql", "RELAYER_TEST_DATABASE_URL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	// Installing needs root and apt-get, which is not on this PATH.
	_, err = Start(context.Background(), Options{Install: true})
	if !errors.Is(err, ErrNoServer) {
		t.Fatalf("Start without binaries or apt-get: %v, want ErrNoServer", err)
	}
	t.Log(err)
}

func TestCompareVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		sign int
	}{
		{"15", "9.6", 1}, {"9.6", "15", -1}, {"16", "16", 0}, {"10", "9", 1}, {"9.6", "9.5", 1},
	} {
		got := compareVersions(tc.a, tc.b)
		if (got > 0) != (tc.sign > 0) || (got < 0) != (tc.sign < 0) {
			t.Errorf("compareVersions(%q, %q) = %d, want sign %d", tc.a, tc.b, got, tc.sign)
		}
	}
}

func TestTail(t *testing.T) {
	var b strings.Builder
	for i := range 100 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	got := tail(b.String())
	if !strings.HasPrefix(got, "line 70\n") || !strings.HasSuffix(got, "line 99") {
		t.Errorf("tail = %q", got)
	}
}

func TestRemoveStale(t *testing.T) {
	parent := t.TempDir()
	mk := func(name string, owner int) string {
		dir := filepath.Join(parent, name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if owner != 0 {
			os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(owner)+"\n"), 0o644)
		}
		return dir
	}
	const deadPID = 1<<31 - 2 // above any pid_max
	stale := mk(dirPrefix+"stale", deadPID)
	live := mk(dirPrefix+"live", os.Getpid())
	noOwner := mk(dirPrefix+"noowner", 0)
	other := mk("unrelated", deadPID)
	removeStale(parent, t.Logf)
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale directory not removed: %v", err)
	}
	for _, dir := range []string{live, noOwner, other} {
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("%s removed: %v", dir, err)
		}
	}
}

// TestOwnerKilled checks that the server does not outlive a program killed
// before it could call Stop, and that the next Start removes its directory.
func TestOwnerKilled(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("parent-death signals are Linux-only")
	}
	parent, err := os.MkdirTemp("", "pgcluster-parent-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	os.Chmod(parent, 0o755)

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperOwner$", "-test.v")
	cmd.Env = append(os.Environ(), "PGCLUSTER_HELPER_DIR="+parent)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// The helper lives until it is killed or this end of its standard
	// input closes (this test ending).
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var pid int
	var dir, dbURL string
	scanner := bufio.NewScanner(stdout)
	for scanner.Scan() {
		if n, _ := fmt.Sscanf(scanner.Text(), "HELPER %d %s %s", &pid, &dir, &dbURL); n == 3 {
			break
		}
		if strings.Contains(scanner.Text(), "SKIP") {
			t.Skip(scanner.Text())
		}
	}
	if pid == 0 {
		cmd.Wait()
		t.Fatal("the helper did not start a cluster")
	}
	go func() { // keep the pipe drained
		for scanner.Scan() {
		}
	}()
	query(t, dbURL, "select 1")

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if !testkit.Within(20*time.Second, func() bool { return !processAlive(pid) }) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("postgres (process %d) still runs 20s after its owner was killed", pid)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the killed owner's cluster directory: %v", err)
	}
	removeStale(parent, t.Logf)
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed owner's cluster directory was not removed: %v", err)
	}
}

// TestHelperOwner is the program killed by TestOwnerKilled.
func TestHelperOwner(t *testing.T) {
	parent := os.Getenv("PGCLUSTER_HELPER_DIR")
	if parent == "" {
		t.Skip("helper for TestOwnerKilled")
	}
	c, err := Start(context.Background(), Options{Dir: parent})
	if errors.Is(err, ErrNoServer) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("HELPER %d %s %s\n", c.proc.cmd.Process.Pid, c.dir, c.URL())
	_, _ = io.Copy(io.Discard, os.Stdin) // until TestOwnerKilled kills it, or lets go
	c.Stop()
}

// TestInstall runs the installation path with a fake apt-get that "installs"
// links to the real server binaries.
func TestInstall(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("installing needs root")
	}
	srv, err := findServer(context.Background())
	if err != nil {
		t.Skip("no server binaries to link to")
	}
	tmp, err := os.MkdirTemp("", "pgcluster-install-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	os.Chmod(tmp, 0o755) // the server's user runs the linked binaries
	binDir, root, logPath := filepath.Join(tmp, "path"), filepath.Join(tmp, "root"), filepath.Join(tmp, "apt.log")
	os.Mkdir(binDir, 0o755)
	script := fmt.Sprintf(`#!/bin/sh
PATH=/usr/sbin:/usr/bin:/sbin:/bin
echo "$DEBIAN_FRONTEND $*" >> %[1]s
if [ "$1" = install ]; then
	mkdir -p %[2]s/15/bin
	ln -s %[3]s %[2]s/15/bin/initdb
	ln -s %[4]s %[2]s/15/bin/postgres
fi
`, logPath, root, srv.initdb, srv.postgres)
	if err := os.WriteFile(filepath.Join(binDir, "apt-get"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", binDir)
	saved := debianRoot
	debianRoot = root
	t.Cleanup(func() { debianRoot = saved })

	if _, err := Start(context.Background(), Options{}); !errors.Is(err, ErrNoServer) {
		t.Fatalf("Start without Install: %v, want ErrNoServer", err)
	}
	c := start(t, Options{Install: true})
	query(t, c.URL(), "select 1")
	log, _ := os.ReadFile(logPath)
	want := "noninteractive update\nnoninteractive install -y -o DPkg::Lock::Timeout=600 postgresql\n"
	if string(log) != want {
		t.Errorf("apt-get calls:\n%s\nwant:\n%s", log, want)
	}
}

// Restart, fast or immediate, cuts the sessions and brings the server back on
// the same URL with what had committed, and without what had not.
func TestRestart(t *testing.T) {
	c := start(t, Options{})
	query(t, c.URL(), "CREATE TABLE kept (n int)")
	for _, immediate := range []bool{false, true} {
		ctx := context.Background()
		conn, err := pgconn.Connect(ctx, c.URL())
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{"INSERT INTO kept VALUES (1)", "BEGIN", "INSERT INTO kept VALUES (2)"} {
			if _, err := conn.Exec(ctx, q).ReadAll(); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Restart(ctx, immediate); err != nil {
			t.Fatalf("Restart(immediate %v): %v", immediate, err)
		}
		if _, err := conn.Exec(ctx, "COMMIT").ReadAll(); err == nil {
			t.Errorf("immediate %v: the session survived the restart", immediate)
		}
		conn.Close(ctx)
		got := query(t, c.URL(), "SELECT count(*) FILTER (WHERE n = 1) || '/' || count(*) FILTER (WHERE n = 2) FROM kept")
		want := "1/0"
		if immediate {
			want = "2/0"
		}
		if len(got) != 1 || got[0] != want {
			t.Errorf("immediate %v: committed/uncommitted rows after restart %v, want %s", immediate, got, want)
		}
	}
}
