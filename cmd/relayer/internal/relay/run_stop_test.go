package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
)

// A stopping relay keeps its endpoints until its workers have stopped:
// after SIGTERM, while a send it holds hangs, /healthz answers 200 and
// /readyz 503 saying "stopping"; once the send returns, the relay exits 0.
// When the deadline cuts the stop short, or a second signal ends it, the
// final error is one JSON line under --log-format json, naming its cause
// once.
func TestRelayServesProbesUntilItsWorkersStop(t *testing.T) {
	t.Parallel()
	dbURL, schema := migrated(t)
	db := testdb.Open(t, "pgx")
	natsURL := startNATSServer(t)
	natsStream(t, natsURL, "DRAIN", "drain.>")
	u, err := url.Parse(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, u.Host)
	w := relayWriter(t, db, schema, relayer.LanesDefault, func(r *relayer.Routes) error {
		return relayer.AddType[relayPlaced](r, relayer.Route{Transport: "events", Destination: "drain.placed"})
	})
	relayEnv := []string{"RELAYER_RECOVERY_CLAIM_DURATION=60s", "RELAYER_RECOVERY_LEASE_DURATION=3s"}
	// hang starts a relay, has it take a row whose send hangs, and sends
	// it SIGTERM; it returns the relay and its endpoints' base URL.
	hang := func(timeout string) (*relayProcess, string) {
		t.Helper()
		p := startRelayProcess(t, "relay-draining", relayEnv, "--database-url", dbURL, "--schema", schema,
			"--transport", "events=nats://"+proxy.addr(), "--http", "127.0.0.1:0", "--shutdown-timeout", timeout, "--log-format", "json")
		m := endpointsAt.FindStringSubmatch(p.stderr.String())
		if m == nil {
			t.Fatalf("no endpoints in the log: %s", p.stderr.String())
		}
		proxy.setStalled(true)
		if err := w.RunInTx(t.Context(), db, nil, func(tx *enlist.Tx) error { return tx.Publish(t.Context(), relayPlaced{1}) }); err != nil {
			t.Fatal(err)
		}
		waitTaken(t, db, schema)
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 10*time.Second, func() bool { return strings.Contains(p.stderr.String(), "relayer run: stopping") }, "the relay to log its stop: %s", p.stderr)
		return p, m[1]
	}
	probe := func(url string) (int, string, error) {
		resp, err := http.Get(url)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		return resp.StatusCode, string(buf[:n]), err
	}

	// The stop waits for the hung send, and the endpoints answer meanwhile.
	p, base := hang("60s")
	// Not a wait: both endpoints answer as they should throughout 2 s of
	// the stop, a check at each 200 ms.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if code, body, err := probe(base + "/healthz"); err != nil || code != http.StatusOK {
			t.Fatalf("/healthz while the workers drain: %d %q, %v; want 200", code, body, err)
		}
		code, body, err := probe(base + "/readyz")
		if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, `{"name":"workers","ok":false,"detail":"stopping"}`) {
			t.Fatalf("/readyz while the workers drain: %d %q, %v; want 503, stopping", code, body, err)
		}
	}
	proxy.setStalled(false)
	select {
	case <-p.exited:
		if p.err != nil {
			t.Errorf("after the send returned: %v; stderr %s", p.err, p.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the relay did not exit once its send returned: %s", p.stderr.String())
	}
	if _, _, err := probe(base + "/healthz"); err == nil {
		t.Errorf("/healthz answers after the relay exited")
	}

	// The deadline cuts the stop short: exit 1, the reason on one JSON
	// line, its cause once.
	p, _ = hang("1s")
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the relay did not exit after its deadline: %s", p.stderr.String())
	}
	proxy.setStalled(false)
	if code := p.cmd.ProcessState.ExitCode(); code != command.ExitFail {
		t.Errorf("exit code %d after the deadline, want %d", code, command.ExitFail)
	}
	lines := strings.Split(strings.TrimSpace(p.stderr.String()), "\n")
	for _, line := range lines {
		if !json.Valid([]byte(line)) {
			t.Errorf("a line of the log is not JSON under --log-format json: %q", line)
		}
	}
	last := lines[len(lines)-1]
	var entry struct{ Level, Msg, Error string }
	if err := json.Unmarshal([]byte(last), &entry); err != nil || entry.Level != "ERROR" || !strings.Contains(entry.Msg+entry.Error, "--shutdown-timeout") {
		t.Errorf("the final line %q: %+v, %v; want an ERROR naming --shutdown-timeout", last, entry, err)
	}
	t.Logf("final line: %s", last)
	if n := strings.Count(last, "deadline exceeded"); n != 1 {
		t.Errorf("the final line names its cause %d times, want once: %q", n, last)
	}

	// A second signal exits at once, its last line JSON too.
	p, _ = hang("60s")
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the relay did not exit at the second signal: %s", p.stderr.String())
	}
	proxy.setStalled(false)
	lines = strings.Split(strings.TrimSpace(p.stderr.String()), "\n")
	last = lines[len(lines)-1]
	entry.Level, entry.Error = "", ""
	if err := json.Unmarshal([]byte(last), &entry); err != nil || entry.Level != "ERROR" || !strings.Contains(entry.Error, "again: exiting at once") ||
		p.cmd.ProcessState.ExitCode() != command.ExitFail {
		t.Errorf("after a second signal: exit code %d, final line %q (%v); want %d and one JSON line", p.cmd.ProcessState.ExitCode(), last, err, command.ExitFail)
	}
}

// The final error names each distinct cause once, whatever the number of
// workers that report it; under --log-format json it is one log line, and
// run prints nothing more; under text, run prints it as one line.
func TestFinalErrorNamesItsCauseOnce(t *testing.T) {
	t.Parallel()
	other := errors.New("transport events: closed")
	err := distinct(errors.Join(context.DeadlineExceeded, errors.Join(context.DeadlineExceeded, other), context.DeadlineExceeded))
	if got, want := err.Error(), "context deadline exceeded; transport events: closed"; got != want || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, other) {
		t.Errorf("distinct: %q, want %q, wrapping both", got, want)
	}
	final := fmt.Errorf("the workers did not finish: %w", err)

	var buf bytes.Buffer
	logger, lerr := newLogger(&buf, "text", "info")
	if lerr != nil {
		t.Fatal(lerr)
	}
	if got := logFinal(logger, "text", final); got != final || buf.Len() != 0 {
		t.Errorf("text: %v, logged %q; want the error back for run to print, nothing logged", got, buf.String())
	}
	if logger, lerr = newLogger(&buf, "json", "info"); lerr != nil {
		t.Fatal(lerr)
	}
	got := logFinal(logger, "json", command.UsageError{Msg: "unknown setting RELAYER_X"})
	var entry struct {
		Level, Msg, Error string
		ExitStatus        int `json:"exit_status"`
	}
	if err := json.Unmarshal(buf.Bytes(), &entry); err != nil || strings.Count(buf.String(), "\n") != 1 ||
		entry.Level != "ERROR" || entry.Error != "unknown setting RELAYER_X" || entry.ExitStatus != command.ExitUsage {
		t.Errorf("json: logged %q (%+v, %v); want one ERROR line with the error and status %d", buf.String(), entry, err, command.ExitUsage)
	}
	if !errors.As(got, new(command.LoggedError)) || command.Status(got) != command.ExitUsage {
		t.Errorf("json: %#v; want it marked as logged, exit status %d", got, command.ExitUsage)
	}
}
