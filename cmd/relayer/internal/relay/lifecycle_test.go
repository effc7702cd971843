package relay

import (
	"context"
	"errors"
	"net/http"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/testkit/syncbuf"
)

// lifecycle is a Relay run in this test process, without a command line:
// the test ends its context for the first signal, and sees its log and its
// end.
type lifecycle struct {
	stderr *syncbuf.Buffer
	cancel context.CancelFunc // the first signal
	done   chan error         // Run's error
	base   string             // its endpoints, http://127.0.0.1:port
}

// lifecycleConfig returns a relay's configuration on a migrated outbox of
// its own with one transport, events=url, and endpoints on a free port.
func lifecycleConfig(t *testing.T, url string) Config {
	t.Helper()
	dbURL, schema := migrated(t)
	return Config{
		Outbox:          command.OutboxFlags{DatabaseURL: dbURL, Schema: schema},
		Transports:      []string{"events=" + url},
		HTTP:            "127.0.0.1:0",
		ShutdownTimeout: 10 * time.Second,
		LogFormat:       "text",
		LogLevel:        "info",
		Name:            "lifecycle-" + schema,
	}
}

// startLifecycle runs a relay as cfg says until it delivers.
func startLifecycle(t *testing.T, cfg Config) *lifecycle {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	l := &lifecycle{stderr: new(syncbuf.Buffer), cancel: cancel, done: make(chan error, 1)}
	r := New(cfg, l.stderr)
	r.notifyAgain = func() (<-chan os.Signal, func()) { return nil, func() {} } // no second signal
	r.exit = func(code int) { t.Errorf("the relay exited at once with %d", code); runtime.Goexit() }
	go func() { l.done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-l.done:
		case <-time.After(30 * time.Second):
			t.Error("the relay did not return after its context ended")
		}
	})
	testkit.Eventually(t, 10*time.Second, func() bool {
		select {
		case err := <-l.done:
			t.Fatalf("the relay returned at its start: %v\n%s", err, l.stderr.String())
		default:
		}
		return strings.Contains(l.stderr.String(), "relayer run: delivering")
	}, "the relay to deliver: %s", l.stderr)
	m := endpointsAt.FindStringSubmatch(l.stderr.String())
	if m == nil {
		t.Fatalf("the relay's log names no endpoints: %s", l.stderr.String())
	}
	l.base = m[1]
	return l
}

// waitReady waits until /readyz answers want.
func (l *lifecycle) waitReady(t *testing.T, want int) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, func() bool {
		code, _ := get(t, "", l.base+"/readyz")
		return code == want
	}, "/readyz to answer %s", http.StatusText(want))
}

// wait returns Run's error, failing the test when it does not return
// within a minute.
func (l *lifecycle) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-l.done:
		l.done <- err // for the cleanup
		return err
	case <-time.After(time.Minute):
		t.Fatalf("the relay did not return: %s", l.stderr.String())
		return nil
	}
}

// The relay starts, becomes ready, and at the first signal lets its
// workers finish and returns nil: exit status 0.
func TestRelayLifecycleStartsAndStopsGracefully(t *testing.T) {
	t.Parallel()
	l := startLifecycle(t, lifecycleConfig(t, startNATSServer(t)))
	l.waitReady(t, http.StatusOK)
	if code, body := get(t, "", l.base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}
	l.cancel()
	if err := l.wait(t); err != nil {
		t.Errorf("Run after the first signal: %v", err)
	}
	log := l.stderr.String()
	for _, want := range []string{"relayer run: stopping: the workers finish what they hold", "relayer run: stopped"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %q:\n%s", want, log)
		}
	}
}

// A second signal while the workers stop exits at once, with status 1 and
// the reason as the last line; none after the stop.
func TestRelayLifecycleSecondSignalExitsAtOnce(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"text", "json"} {
		stderr := new(syncbuf.Buffer)
		logger, err := newLogger(stderr, format, "info")
		if err != nil {
			t.Fatal(err)
		}
		r := &Relay{cfg: Config{LogFormat: format}, stderr: stderr, logger: logger}
		again := make(chan os.Signal, 1)
		unsubscribed := make(chan struct{}, 2)
		r.notifyAgain = func() (<-chan os.Signal, func()) { return again, func() { unsubscribed <- struct{}{} } }
		exited := make(chan int, 1)
		r.exit = func(code int) { exited <- code; runtime.Goexit() }

		stopping := make(chan struct{})
		r.exitOnSecondSignal(stopping)
		again <- syscall.SIGTERM
		select {
		case code := <-exited:
			if code != command.ExitFail {
				t.Errorf("%s: exit status %d, want %d", format, code, command.ExitFail)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no exit after the second signal", format)
		}
		if log := stderr.String(); !strings.Contains(log, "terminated again: exiting at once") {
			t.Errorf("%s: the last line does not say why: %q", format, log)
		}

		// Once the workers stopped, a signal is left to the process.
		r.exit = func(code int) { t.Errorf("%s: exit %d after the stop", format, code) }
		stopped := make(chan struct{})
		r.exitOnSecondSignal(stopped)
		close(stopped)
		for range 2 {
			select {
			case <-unsubscribed:
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: the signals stay subscribed after an exit or a stop", format)
			}
		}
		close(stopping)
	}
}

// A broker connection that goes away makes the relay not ready, and ready
// again once it is back; the relay keeps running meanwhile.
func TestRelayLifecycleNotReadyWhileTheBrokerIsAway(t *testing.T) {
	t.Parallel()
	proxy := startProxy(t, strings.TrimPrefix(startNATSServer(t), "nats://"))
	l := startLifecycle(t, lifecycleConfig(t, "nats://"+proxy.addr()))
	l.waitReady(t, http.StatusOK)
	proxy.setDown(true)
	l.waitReady(t, http.StatusServiceUnavailable)
	if _, body := get(t, "", l.base+"/readyz"); !strings.Contains(body, `"name":"transport:events","ok":false`) {
		t.Errorf("/readyz does not name the transport: %s", body)
	}
	proxy.setDown(false)
	l.waitReady(t, http.StatusOK)
	l.cancel()
	if err := l.wait(t); err != nil {
		t.Errorf("Run after the first signal: %v", err)
	}
}

// A RabbitMQ connection, which its client does not reconnect, that closes
// stops the relay with the cause: exit status 1, for its supervisor to
// start it again.
//
// It sets an environment variable (t.Setenv), so it does not run in
// parallel.
func TestRelayLifecycleStopsWhenItLosesRabbitMQ(t *testing.T) {
	rabbit := rabbitURL()
	if rabbit == "" {
		t.Skip("no RabbitMQ on 127.0.0.1:5672")
	}
	proxy := startProxy(t, "127.0.0.1:5672")
	t.Setenv("RELAYER_TEST_LIFECYCLE_AMQP", strings.Replace(rabbit, "127.0.0.1:5672", proxy.addr(), 1))
	cfg := lifecycleConfig(t, "")
	cfg.Transports = []string{"events=env:RELAYER_TEST_LIFECYCLE_AMQP"}
	l := startLifecycle(t, cfg)
	l.waitReady(t, http.StatusOK)
	proxy.setDown(true)
	err := l.wait(t)
	if err == nil || !strings.Contains(err.Error(), "transport events: the broker connection closed") {
		t.Fatalf("Run after the broker went away: %v, want the lost connection", err)
	}
	if command.Status(err) != command.ExitFail || errors.As(err, new(command.UsageError)) {
		t.Errorf("exit status %d, want %d", command.Status(err), command.ExitFail)
	}
	if !strings.Contains(l.stderr.String(), "relayer run: stopping") {
		t.Errorf("the log does not say why it stops:\n%s", l.stderr.String())
	}
}
