package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNoServer is returned, wrapped, by Start when no PostgreSQL server
// binaries can be found and installing them was not possible (not allowed, not
// running as root, no apt-get, or the installation failed). Test it with
// errors.Is.
var ErrNoServer = errors.New("no PostgreSQL server binaries (initdb, postgres) found: " +
	"install PostgreSQL (on Debian or Ubuntu, as root: apt-get install postgresql) " +
	"or set RELAYER_TEST_DATABASE_URL to the URL of an existing database")

// Superuser is the name of the cluster's superuser role; URL connects as it.
const Superuser = "postgres"

const (
	// dirPrefix starts the name of every cluster directory, so that stale ones
	// can be recognised and removed.
	dirPrefix = "relayer-pgcluster-"
	// ownerFile, inside a cluster directory, holds the PID of the owning
	// program.
	ownerFile = "owner.pid"
	logName   = "server.log"
	dataName  = "data"

	portAttempts   = 5
	readyTimeout   = 60 * time.Second
	connectTimeout = 2 * time.Second
	pollInterval   = 25 * time.Millisecond
	quitTimeout    = 10 * time.Second
	killTimeout    = 5 * time.Second
)

// managedSettings are server settings that Start chooses itself; URL depends on
// them, so Options.Settings may not override them.
var managedSettings = []string{"port", "listen_addresses"}

// Options configures Start. The zero value is usable.
type Options struct {
	// Dir is the parent directory of the cluster's temporary directory;
	// os.TempDir() when empty. When running as root it must be traversable by
	// the OS user the server runs as (see the package documentation).
	Dir string
	// Install allows Start, when no server binaries are found and the
	// program runs as root, to install Debian's postgresql package with
	// apt-get (which takes a minute or more).
	Install bool
	// Logf, if not nil, receives progress messages.
	Logf func(format string, args ...any)
	// Settings holds extra server settings, passed to postgres as
	// "-c name=value"; they override the defaults chosen by Start. The port
	// and listen_addresses settings are managed by Start and may not be set.
	Settings map[string]string
}

// Cluster is a running throwaway PostgreSQL cluster started by Start. Its
// methods are safe for concurrent use.
type Cluster struct {
	dir  string
	port int
	url  string
	proc *proc
	logf func(format string, args ...any)

	// What Restart starts the server again with.
	srv      server
	owner    osUser
	settings map[string]string
	restart  sync.Mutex

	stopOnce sync.Once
	stopErr  error
}

// Start creates a throwaway cluster in a new temporary directory under
// opts.Dir, starts its server and waits until it accepts connections. The
// context bounds the whole start-up, including any installation; it does not
// affect the cluster once Start has returned. The caller must call Stop.
//
// When no server binaries are found the returned error wraps ErrNoServer. On
// other failures the error includes the end of the server's log.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	for name := range opts.Settings {
		if slices.Contains(managedSettings, strings.ToLower(name)) {
			return nil, fmt.Errorf("pgcluster: setting %q is managed by pgcluster and cannot be overridden", name)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	parent := opts.Dir
	if parent == "" {
		parent = os.TempDir()
	}
	parent, err := filepath.Abs(parent)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	removeStale(parent, logf)

	srv, err := findServer(ctx)
	if errors.Is(err, errNotFound) {
		if !opts.Install {
			return nil, fmt.Errorf("pgcluster: %w", ErrNoServer)
		}
		srv, err = install(ctx, logf)
	}
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	if opts.Logf != nil {
		if version, err := exec.CommandContext(ctx, srv.postgres, "--version").Output(); err == nil {
			logf("using %s (%s)", strings.TrimSpace(string(version)), filepath.Dir(srv.postgres))
		}
	}

	owner, err := serverUser()
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	dir, err := os.MkdirTemp(parent, dirPrefix+"*")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: creating cluster directory: %w", err)
	}
	c := &Cluster{dir: dir, logf: logf}
	ok := false
	defer func() {
		if !ok {
			_ = c.Stop()
		}
	}()
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	if err := owner.chown(dir); err != nil {
		return nil, fmt.Errorf("pgcluster: handing the cluster directory to OS user %s: %w", owner.name, err)
	}

	began := time.Now()
	if err := c.initdb(ctx, srv, owner); err != nil {
		return nil, err
	}
	logf("initdb done in %v", time.Since(began).Round(time.Millisecond))
	if err := c.startServer(ctx, srv, owner, opts.Settings); err != nil {
		return nil, err
	}
	logf("PostgreSQL ready at %s after %v (cluster directory %s)", c.url, time.Since(began).Round(time.Millisecond), dir)
	ok = true
	return c, nil
}

// URL returns the URL of the cluster's "postgres" database, connecting as the
// superuser over TCP without a password or TLS:
// postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable.
func (c *Cluster) URL() string { return c.url }

// Stop shuts the server down (immediate shutdown: the data is discarded
// anyway) and removes the cluster directory. It is idempotent, may be called
// on a nil *Cluster, and returns the same result on every call.
func (c *Cluster) Stop() error {
	if c == nil {
		return nil
	}
	c.stopOnce.Do(func() {
		c.restart.Lock()
		defer c.restart.Unlock()
		var errs []error
		if c.proc != nil {
			errs = append(errs, c.proc.stop())
		}
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, err)
		}
		if err := errors.Join(errs...); err != nil {
			c.stopErr = fmt.Errorf("pgcluster: stopping %s: %w", c.dir, err)
		}
	})
	return c.stopErr
}

// Restart shuts the server down and starts it again on the same port and
// data, for tests of what clients do when their database goes away. A fast
// shutdown (immediate false) rolls back open transactions and checkpoints;
// an immediate one kills the server as a crash would, and the start
// recovers from the write-ahead log. Sessions are cut either way. It returns
// once the server accepts connections again.
func (c *Cluster) Restart(ctx context.Context, immediate bool) error {
	c.restart.Lock()
	defer c.restart.Unlock()
	if c.proc == nil {
		return errors.New("pgcluster: Restart of a cluster that is not running")
	}
	var sig os.Signal = syscall.SIGINT // fast shutdown
	if immediate {
		sig = sigQuit
	}
	if err := c.proc.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("pgcluster: signalling postgres: %w", err)
	}
	select {
	case <-c.proc.exited:
	case <-time.After(quitTimeout):
		if err := c.proc.kill(); err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
	case <-ctx.Done():
		return fmt.Errorf("pgcluster: %w", ctx.Err())
	}
	var err error
	for attempt := 1; attempt <= portAttempts; attempt++ {
		var retry bool
		if retry, err = c.tryStart(ctx, c.srv, c.owner, c.settings, c.port); err == nil || !retry {
			return err
		}
		time.Sleep(200 * time.Millisecond) // the port is ours: wait for the old socket to go
	}
	return err
}

func (c *Cluster) dataDir() string { return filepath.Join(c.dir, dataName) }
func (c *Cluster) logPath() string { return filepath.Join(c.dir, logName) }

// initdb creates the cluster's data directory.
func (c *Cluster) initdb(ctx context.Context, srv server, owner osUser) error {
	var out strings.Builder
	cmd := exec.Command(srv.initdb,
		"-D", c.dataDir(),
		"-A", "trust",
		"-U", Superuser,
		"-E", "UTF8",
		"--no-locale",
		"--no-sync",
	)
	cmd.Dir = c.dir
	cmd.Env = childEnv()
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.SysProcAttr = owner.sysProcAttr(syscall.SIGKILL)
	p, err := launch(cmd)
	if err != nil {
		return fmt.Errorf("pgcluster: running initdb: %w", err)
	}
	select {
	case <-p.exited:
	case <-ctx.Done():
		_ = p.kill()
		<-p.exited
		return fmt.Errorf("pgcluster: running initdb: %w", ctx.Err())
	}
	if p.waitErr != nil {
		hint := ""
		if owner.cred != nil {
			hint = fmt.Sprintf(" (the directory %s and its parents must be accessible to OS user %s)", c.dir, owner.name)
		}
		return fmt.Errorf("pgcluster: initdb failed: %w%s\n%s", p.waitErr, hint, tail(out.String()))
	}
	return nil
}

// startServer starts postgres on a free port and waits until it is ready,
// retrying on another port if the chosen one is taken in the meantime.
func (c *Cluster) startServer(ctx context.Context, srv server, owner osUser, extra map[string]string) error {
	settings := map[string]string{
		"listen_addresses":        "127.0.0.1",
		"unix_socket_directories": c.dir,
		"fsync":                   "off",
		"full_page_writes":        "off",
		"max_connections":         "200",
		"shared_buffers":          "128MB",
	}
	// Unix socket paths are limited to about 107 bytes; do without the
	// socket rather than fail when the directory is too deep.
	if len(c.dir)+len("/.s.PGSQL.65535.lock") > 100 {
		settings["unix_socket_directories"] = ""
	}
	maps.Copy(settings, extra)

	var lastErr error
	for attempt := 1; attempt <= portAttempts; attempt++ {
		port, err := freePort()
		if err != nil {
			return fmt.Errorf("pgcluster: finding a free port: %w", err)
		}
		settings["port"] = strconv.Itoa(port)
		retry, err := c.tryStart(ctx, srv, owner, settings, port)
		if err == nil {
			c.srv, c.owner, c.settings = srv, owner, settings
			return nil
		}
		if !retry {
			return err
		}
		c.logf("port %d was taken, retrying with another one", port)
		lastErr = err
	}
	return lastErr
}

// tryStart starts postgres on the given port and waits for it. On failure it
// reports whether the port was in use, in which case the caller may retry.
func (c *Cluster) tryStart(ctx context.Context, srv server, owner osUser, settings map[string]string, port int) (retry bool, err error) {
	logFile, err := os.OpenFile(c.logPath(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return false, fmt.Errorf("pgcluster: %w", err)
	}
	defer logFile.Close() // the child has its own copy
	if err := owner.chown(c.logPath()); err != nil {
		return false, fmt.Errorf("pgcluster: %w", err)
	}
	logStart, _ := logFile.Seek(0, 2)

	args := []string{"-D", c.dataDir()}
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		args = append(args, "-c", name+"="+settings[name])
	}
	cmd := exec.Command(srv.postgres, args...)
	cmd.Dir = c.dir
	cmd.Env = childEnv()
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = owner.sysProcAttr(syscall.SIGQUIT)
	p, err := launch(cmd)
	if err != nil {
		return false, fmt.Errorf("pgcluster: starting postgres: %w", err)
	}
	c.proc = p
	c.port = port
	c.url = fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", Superuser, port)

	err = c.waitReady(ctx)
	if err == nil {
		return false, nil
	}
	_ = p.stop()
	c.proc = nil
	serverLog := c.readLog(logStart)
	retry = strings.Contains(serverLog, "already in use")
	return retry, fmt.Errorf("pgcluster: starting postgres: %w\nserver log:\n%s", err, tail(serverLog))
}

// waitReady waits until the server accepts connections, it exits, or ctx or
// the start-up timeout expires.
func (c *Cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	// Abandon a connection attempt as soon as the server exits. The channel
	// is read here: a Restart may replace c.proc after this returns.
	exited := c.proc.exited
	go func() {
		select {
		case <-exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	var lastErr error
	for {
		err := c.ping(ctx)
		if err == nil {
			return nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
		case <-time.After(pollInterval):
			continue
		}
		select {
		case <-c.proc.exited:
			return fmt.Errorf("server exited during start-up: %v", c.proc.waitErr)
		default:
			return fmt.Errorf("waiting for the server to accept connections: %w (last attempt: %v)", ctx.Err(), lastErr)
		}
	}
}

// ping connects to the server and checks that it is this cluster's server,
// not another one that took the port after the cluster's server failed to.
func (c *Cluster) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	conn, err := pgconn.Connect(ctx, c.url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	results, err := conn.Exec(ctx, "select current_setting('data_directory')").ReadAll()
	if err != nil {
		return err
	}
	if len(results) != 1 || len(results[0].Rows) != 1 {
		return errors.New("unexpected reply to a query for data_directory")
	}
	got := string(results[0].Rows[0][0])
	if got != c.dataDir() {
		want, err1 := os.Stat(c.dataDir())
		have, err2 := os.Stat(got)
		if err1 != nil || err2 != nil || !os.SameFile(want, have) {
			return fmt.Errorf("port %d is served by another server (data directory %s)", c.port, got)
		}
	}
	return nil
}

// readLog returns the server log from the given offset.
func (c *Cluster) readLog(from int64) string {
	b, err := os.ReadFile(c.logPath())
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", c.logPath(), err)
	}
	if from > 0 && from <= int64(len(b)) {
		b = b[from:]
	}
	return string(b)
}

// tail returns about the last 30 lines of s.
func tail(s string) string {
	const maxLines, maxBytes = 30, 8 << 10
	s = strings.TrimRight(s, "\n")
	if len(s) > maxBytes {
		s = s[len(s)-maxBytes:]
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
	}
	lines := strings.Split(s, "\n")
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return strings.Join(lines, "\n")
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago. A
// variable for tests.
var freePort = func() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// childEnv is the environment of initdb and postgres: the program's own,
// without libpq and locale variables, in the C locale so that messages are
// predictable.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "PG") || strings.HasPrefix(name, "LC_") || name == "LANG" || name == "LANGUAGE" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C", "LANG=C")
}

// proc is a child process started by launch.
type proc struct {
	cmd     *exec.Cmd
	exited  chan struct{} // closed once the process has been waited for
	waitErr error         // the result of cmd.Wait, set before exited is closed
}

// launch starts cmd and returns once it has started. A goroutine (supervise)
// waits for the process.
func launch(cmd *exec.Cmd) (*proc, error) {
	p := &proc{cmd: cmd, exited: make(chan struct{})}
	started := make(chan error, 1)
	go p.supervise(started)
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// supervise starts the process and waits for it. On Linux the parent-death
// signal set in SysProcAttr is tied to the OS thread that forked the child,
// not to the process, so the goroutine stays locked to its thread for as long
// as the child runs: the signal then fires only when the whole program dies.
// The thread is never unlocked, so it ends with the goroutine.
func (p *proc) supervise(started chan<- error) {
	runtime.LockOSThread()
	if err := p.cmd.Start(); err != nil {
		started <- err
		return
	}
	started <- nil
	p.waitErr = p.cmd.Wait()
	close(p.exited)
}

// stop asks a running server for an immediate shutdown (SIGQUIT), then kills
// its process group if it takes too long, and waits for it to exit.
func (p *proc) stop() error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(sigQuit); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return p.kill()
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(quitTimeout):
		return p.kill()
	}
}

// kill kills the process and its process group and waits for it to exit.
func (p *proc) kill() error {
	killGroup(p.cmd.Process)
	select {
	case <-p.exited:
		return nil
	case <-time.After(killTimeout):
		return fmt.Errorf("process %d did not exit after being killed", p.cmd.Process.Pid)
	}
}

// removeStale removes the cluster directories under parent whose owning
// program and server have both gone, typically because the owner was killed
// before it could call Stop. Directories it cannot judge are left alone.
func removeStale(parent string, logf func(string, ...any)) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), dirPrefix) {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		owner, ok := readPID(filepath.Join(dir, ownerFile))
		if !ok || processAlive(owner) {
			continue
		}
		if server, ok := readPID(filepath.Join(dir, dataName, "postmaster.pid")); ok && processAlive(server) {
			continue
		}
		if err := os.RemoveAll(dir); err == nil {
			logf("removed stale cluster directory %s (its owner, process %d, is gone)", dir, owner)
		}
	}
}

// readPID reads a PID from the first line of a file.
func readPID(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	return pid, err == nil && pid > 0
}
