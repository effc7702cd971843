package consume_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/relayer-go/relayer/internal/testkit/syncbuf"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

// relayBrokerEnv names the variable that hands a relay process its
// broker's URL, which may hold a password and so is not written out on its
// command line (the relay refuses that).
const relayBrokerEnv = "ORDER_TEST_BROKER_URL"

// buildRelay builds the deployable relay (cmd/relayer/relay) into dir and
// returns its path.
func buildRelay(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "relayer")
	start := time.Now()
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/relayer/relay")
	cmd.Dir = "../.." // the repository's root, in the workspace of this module
	cmd.Env = append(os.Environ(), "GOFLAGS=", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/relayer/relay: %v\n%s", err, out)
	}
	t.Logf("built the deployable relay in %s", time.Since(start).Round(time.Millisecond))
	return bin
}

// relayProcess is a `relayer run` process delivering a test's outbox.
type relayProcess struct {
	name   string
	cmd    *exec.Cmd
	logs   *syncbuf.Buffer
	exited chan error
}

// startRelay starts `relayer run` on the outbox tables, with one
// transport named "broker" at brokerURL, under the relay name name.
func startRelay(t *testing.T, bin string, tables store.Tables, brokerURL, name string) *relayProcess {
	t.Helper()
	p := &relayProcess{name: name, logs: &syncbuf.Buffer{}, exited: make(chan error, 1)}
	p.cmd = exec.Command(bin, "run", "--database-url", testdb.URL(t), "--schema", tables.Schema, "--prefix", tables.TablePrefix,
		"--transport", "broker=env:"+relayBrokerEnv, "--name", name, "--shutdown-timeout", "5s", "--log-level", "warn")
	p.cmd.Env = append(os.Environ(), relayBrokerEnv+"="+brokerURL)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start relay %s: %v", name, err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// kill ends the relay with SIGKILL, as a crash would: its leases stay
// until they expire.
func (p *relayProcess) kill(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// stop asks the relay to stop with SIGTERM and fails the test unless it
// exits with 0 in time.
func (p *relayProcess) stop(t *testing.T) {
	t.Helper()
	select {
	case err := <-p.exited:
		t.Fatalf("relay %s exited before it was stopped (%v):\n%s", p.name, err, p.logs)
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		if err != nil {
			t.Errorf("relay %s stopped with %v:\n%s", p.name, err, p.logs)
		}
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		t.Errorf("relay %s did not stop within 30 s of SIGTERM:\n%s", p.name, p.logs)
	}
}

// relayURL is the URL a relay reaches the broker of cfg at.
func relayURL(cfg processConfig) string {
	if cfg.Broker == "kafka" {
		return "kafka://" + cfg.Addr
	}
	return cfg.Addr
}
