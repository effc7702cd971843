package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	"github.com/relayer-go/relayer/cmd/relayer/internal/commandtest"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/testkit/syncbuf"
)

func TestConsoleNeedsATokenOffLoopback(t *testing.T) {
	t.Parallel()
	for _, listen := range []string{"0.0.0.0:8080", ":8080", "192.0.2.1:8080"} {
		r := runCmd(t, "console", "--database-url", "postgres://nowhere/db", "--listen", listen)
		if r.Code != command.ExitUsage || !strings.Contains(r.Stderr, "--token") {
			t.Errorf("--listen %s without --token: code %d, stderr %q", listen, r.Code, r.Stderr)
		}
	}
	if r := runCmd(t, "console", "-h"); r.Code != command.ExitOK || !strings.Contains(r.Stderr, "example:\n  relayer console") {
		t.Errorf("console -h: code %d\n%s", r.Code, r.Stderr)
	}
}

var servingOn = regexp.MustCompile(`on (http://[0-9.:]+/)`)

// runningConsole is a "relayer console" started by startConsole.
type runningConsole struct {
	base           string // http://127.0.0.1:port/
	stdout, stderr *syncbuf.Buffer
	cancel         context.CancelFunc // Ctrl-C
	code           chan int
}

// startConsole runs "relayer console" with args (which should listen on
// 127.0.0.1:0) and waits until it says where it serves.
func startConsole(t *testing.T, args ...string) *runningConsole {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	rc := &runningConsole{stdout: new(syncbuf.Buffer), stderr: new(syncbuf.Buffer), cancel: cancel, code: make(chan int, 1)}
	go func() { rc.code <- run(ctx, append([]string{"console"}, args...), rc.stdout, rc.stderr) }()
	if !testkit.Within(20*time.Second, func() bool {
		if m := servingOn.FindStringSubmatch(rc.stdout.String()); m != nil {
			rc.base = m[1]
		}
		return rc.base != ""
	}) {
		t.Fatalf("the console did not say where it serves; stdout %q, stderr %q", rc.stdout.String(), rc.stderr.String())
	}
	return rc
}

// stop interrupts the console and checks that it exits cleanly.
func (rc *runningConsole) stop(t *testing.T) {
	t.Helper()
	rc.cancel()
	select {
	case c := <-rc.code:
		if c != command.ExitOK {
			t.Errorf("exit code %d after Ctrl-C, stderr %q", c, rc.stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the console did not stop after Ctrl-C")
	}
}

// migrated returns the test database's URL and a schema of the test's own
// holding a migrated outbox.
func migrated(t *testing.T) (string, string) { return commandtest.Migrated(t) }

// The command serves the console until Ctrl-C, refusing requests without
// its token.
func TestConsoleServesUntilInterrupted(t *testing.T) {
	t.Parallel()
	url, schema := migrated(t)
	rc := startConsole(t, "--database-url", url, "--schema", schema, "--listen", "127.0.0.1:0", "--token", "t0ken", "--read-only")
	base := rc.base
	if !strings.Contains(rc.stdout.String(), "read-only") {
		t.Errorf("the start line does not say read-only: %q", rc.stdout.String())
	}
	resp, err := http.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without the token: %d, want 401", resp.StatusCode)
	}
	req, _ := http.NewRequest("GET", base, nil)
	req.Header.Set("Authorization", "Bearer t0ken")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("with the token: %d", resp.StatusCode)
	}
	rc.stop(t)
}

// getFor is a GET of url as a browser would send it for a page of host.
func getFor(t *testing.T, host, url string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// The command answers to loopback names and to each --allowed-host, given
// repeated or comma-separated; any other host name gets 421.
func TestConsoleAnswersOnlyItsHostNames(t *testing.T) {
	t.Parallel()
	url, schema := migrated(t)
	rc := startConsole(t, "--database-url", url, "--schema", schema, "--listen", "127.0.0.1:0",
		"--allowed-host", "ops.example.com, ops.internal:8080", "--allowed-host", "10.0.0.5")
	for host, want := range map[string]int{
		"localhost":               http.StatusOK,
		"ops.example.com":         http.StatusOK,
		"ops.internal:8080":       http.StatusOK,
		"ops.internal:9090":       http.StatusMisdirectedRequest,
		"10.0.0.5:8080":           http.StatusOK,
		"rebind.attacker.example": http.StatusMisdirectedRequest,
	} {
		if got := getFor(t, host, rc.base+"dead"); got != want {
			t.Errorf("GET /dead for %s: %d, want %d", host, got, want)
		}
	}
	rc.stop(t)

	if r := runCmd(t, "console", "--database-url", "postgres://nowhere/db", "--allowed-host", "*.example.com"); r.Code != command.ExitUsage || !strings.Contains(r.Stderr, "AllowedHosts") {
		t.Errorf("a wildcard --allowed-host: code %d, stderr %q", r.Code, r.Stderr)
	}
}

func TestConsoleAllowsTheListenHost(t *testing.T) {
	t.Parallel()
	for listen, want := range map[string][]string{
		"127.0.0.1:8080":       nil,
		"localhost:8080":       nil,
		"0.0.0.0:8080":         nil,
		":8080":                nil,
		"[::]:8080":            nil,
		"10.1.2.3:8080":        {"10.1.2.3"},
		"ops.example.com:8080": {"ops.example.com"},
		"[2001:db8::1]:8080":   {"2001:db8::1"},
		"not a listen address": nil,
	} {
		if got := command.AllowedHosts(listen, nil); !slices.Equal(got, want) {
			t.Errorf("--listen %s: %q, want %q", listen, got, want)
		}
	}
	if got := command.AllowedHosts("10.1.2.3:80", []string{"a.example"}); !slices.Equal(got, []string{"10.1.2.3", "a.example"}) {
		t.Errorf("with --allowed-host: %q", got)
	}
}

// The command opens at most --max-conns connections (application_name
// tells them apart in pg_stat_activity), however many page loads wait on
// a locked outbox, and each ends at --query-timeout.
func TestConsoleBoundsItsPool(t *testing.T) {
	t.Parallel()
	dbURL, schema := migrated(t)
	u, err := neturl.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	app := "console_test_" + schema
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	rc := startConsole(t, "--database-url", u.String(), "--schema", schema, "--listen", "127.0.0.1:0", "--max-conns", "2", "--query-timeout", "1s")

	db, err := command.OpenDB(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(t.Context(), `LOCK TABLE "`+schema+`"."outbox" IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	var peak int
	stop := make(chan struct{})
	var watch sync.WaitGroup
	watch.Go(func() {
		for {
			var n int
			if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
				t.Error(err)
				return
			}
			peak = max(peak, n)
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
	start := time.Now()
	statuses := make([]int, 12)
	var loads sync.WaitGroup
	for i := range statuses {
		loads.Go(func() {
			resp, err := http.Get(rc.base)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		})
	}
	loads.Wait()
	took := time.Since(start)
	close(stop)
	watch.Wait()
	if peak > 2 {
		t.Errorf("the console held %d connections at once, want at most 2 (--max-conns)", peak)
	}
	for i, s := range statuses {
		if s != http.StatusServiceUnavailable {
			t.Errorf("page load %d: %d, want 503", i, s)
		}
	}
	if took > 5*time.Second {
		t.Errorf("12 page loads took %s with --query-timeout 1s", took.Round(time.Millisecond))
	}
	tx.Rollback()
	rc.stop(t)
}

func TestConsoleHelpSaysWhatIsBounded(t *testing.T) {
	t.Parallel()
	r := runCmd(t, "console", "-h")
	for _, want := range []string{"--allowed-host", "-max-conns", "-query-timeout", "-sample-every", "421", "64 KiB", "1 KiB"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("console -h does not mention %s:\n%s", want, r.Stderr)
		}
	}
	for _, args := range [][]string{{"--max-conns", "0"}, {"--max-conns", "101"}, {"--query-timeout", "0s"}, {"--query-timeout", "1ms"}, {"--sample-every", "0s"}, {"--sample-every", "2m"}} {
		r := runCmd(t, append([]string{"console", "--database-url", "postgres://nowhere/db"}, args...)...)
		if r.Code != command.ExitUsage || !strings.Contains(r.Stderr, args[0]) {
			t.Errorf("%s %s: code %d, stderr %q", args[0], args[1], r.Code, r.Stderr)
		}
	}
}

// A client that sends a request's body slowly loses its connection once the
// read timeout passes, instead of holding it as long as it likes.
func TestConsoleServerCutsSlowBodies(t *testing.T) {
	t.Parallel()
	srv := command.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "POST /redrive HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\nx")
	// Dribble a byte a second; the server must end the request anyway.
	go func() {
		for i := 0; i < 60; i++ {
			time.Sleep(time.Second)
			if _, err := conn.Write([]byte("x")); err != nil {
				return
			}
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(command.ServerReadTimeout + 10*time.Second))
	buf := make([]byte, 512)
	for {
		if _, err := conn.Read(buf); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("the connection was still open after %s", time.Since(start).Round(time.Second))
			}
			break
		}
	}
	if took := time.Since(start); took > command.ServerReadTimeout+5*time.Second {
		t.Errorf("the slow body held its connection for %s", took.Round(time.Second))
	}
}
