package relay

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
)

// readyz returns /readyz's status and body.
func (rr *runningRelay) readyz(t *testing.T) (int, string) {
	t.Helper()
	resp, err := http.Get(rr.base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitReadyz waits up to within for /readyz to answer want with a body
// holding each of contains.
func (rr *runningRelay) waitReadyz(t *testing.T, within time.Duration, want int, contains ...string) {
	t.Helper()
	var code int
	var body string
	if !testkit.Within(within, func() bool {
		code, body = rr.readyz(t)
		ok := code == want
		for _, c := range contains {
			ok = ok && strings.Contains(body, c)
		}
		return ok
	}) {
		t.Fatalf("/readyz within %s: %d %s; want %d with %q\nstderr %s", within, code, body, want, contains, rr.stderr.String())
	}
}

// While the broker is unreachable the relay says so: /readyz turns 503,
// naming the transport and its paused destination with the time it was
// paused, and the log says once that the connection was lost and once that
// the destination is paused. Once the broker is back, the log says so and
// the messages written meanwhile arrive within seconds (the paused
// destination is probed every few seconds, not every minute). Before,
// /readyz answered 200 throughout and no line named the broker.
func TestRunReportsABrokerOutage(t *testing.T) {
	t.Parallel()
	testBrokerOutage(t, (*tcpProxy).setDown)
}

// The same when the broker stops answering without closing its
// connections (a frozen process, a network that drops packets): the
// client's pings find it out.
func TestRunReportsAFrozenBroker(t *testing.T) {
	t.Parallel()
	testBrokerOutage(t, (*tcpProxy).setStalled)
}

// testBrokerOutage runs a relay whose NATS connection goes through a proxy,
// cuts the broker off with cut(proxy, true) for a while, then brings it
// back with cut(proxy, false).
func testBrokerOutage(t *testing.T, cut func(p *tcpProxy, on bool)) {
	dbURL, schema := migrated(t)
	db := testdb.Open(t, "pgx")
	natsURL := startNATSServer(t)
	js := natsStream(t, natsURL, "OUTAGE", "outage.>")
	u, err := url.Parse(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, u.Host)
	rr := startRelay(t, "--database-url", dbURL, "--schema", schema, "--transport", "events=nats://"+proxy.addr(), "--http", "127.0.0.1:0")
	w := relayWriter(t, db, schema, relayer.LanesDefault, func(r *relayer.Routes) error {
		if err := relayer.AddType[relayPlaced](r, relayer.Route{Transport: "events", Destination: "outage.placed"}); err != nil {
			return err
		}
		return relayer.AddType[relayActivity](r, relayer.Route{Transport: "events", Destination: "outage.activity", Ordered: true})
	})
	write := func(i int) {
		t.Helper()
		err := w.RunInTx(t.Context(), db, nil, func(tx *enlist.Tx) error {
			return tx.PublishAll(t.Context(), relayer.NewOutgoing(relayPlaced{i}), relayer.NewOutgoing(relayActivity{i}, relayer.Key("k")))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	outboxEmpty := func() bool {
		var n int
		return db.QueryRow(`SELECT count(*) FROM "`+schema+`".outbox`).Scan(&n) == nil && n == 0
	}
	write(0)
	testkit.Eventually(t, 10*time.Second, outboxEmpty, "the first messages to leave the outbox: %s", rr.stderr)
	rr.waitReadyz(t, 10*time.Second, http.StatusOK, `"ready":true`, `{"name":"transport:events","ok":true,"detail":"nats: connected"}`)

	cut(proxy, true)
	write(1)
	rr.waitReadyz(t, 45*time.Second, http.StatusServiceUnavailable, `"ready":false`, `"name":"transport:events","ok":false`,
		`"destination":"outage.`, `"since":"`)
	// An absence over the outage's length, long enough for a back-off that
	// doubles to pass several seconds: the outbox does not empty, and the
	// lost connection and each paused destination are logged once, not at
	// each try (checked below).
	time.Sleep(20 * time.Second)
	write(2)
	if outboxEmpty() {
		t.Fatal("the outbox emptied while the broker was down")
	}
	log := rr.stderr.String()
	if n := strings.Count(log, "broker connection lost"); n != 1 {
		t.Errorf("%d lines say the broker connection was lost, want 1:\n%s", n, log)
	}
	// A frozen broker's sends may still be waiting for their deadline: at
	// most one line per destination, and at least one in all.
	pauses := 0
	for _, d := range []string{"outage.placed", "outage.activity"} {
		n := linesWith(log, "level=WARN", "paused:", "destination="+d+" ")
		if n > 1 {
			t.Errorf("%d warnings say the destination %s is paused, want 1:\n%s", n, d, log)
		}
		pauses += n
	}
	if pauses == 0 {
		t.Errorf("no line says a destination is paused:\n%s", log)
	}

	cut(proxy, false)
	// A generous bound: paused destinations are probed every 5 s at most
	// (up to a minute before), and NATS reconnects within about 2 s; it
	// is not a measure of speed.
	testkit.Eventually(t, 20*time.Second, outboxEmpty, "the messages written during the outage to leave the outbox after the broker's return:\n%s", rr.stderr)
	rr.waitReadyz(t, 10*time.Second, http.StatusOK, `"ready":true`)
	log = rr.stderr.String()
	if !strings.Contains(log, "broker connection back") || !strings.Contains(log, "destination back") {
		t.Errorf("the broker's and the destinations' return are not logged:\n%s", log)
	}
	info, err := js.Stream(t.Context(), "OUTAGE")
	if err != nil {
		t.Fatal(err)
	}
	if si, err := info.Info(t.Context()); err != nil || si.State.Msgs < 6 {
		t.Errorf("the stream holds %+v (%v), want at least the 6 messages written", si.State, err)
	}
	rr.stop(t)
}

// linesWith counts the lines of text that hold every one of subs.
func linesWith(text string, subs ...string) int {
	n := 0
	for line := range strings.Lines(text) {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(line, s)
		}
		if all {
			n++
		}
	}
	return n
}

// After a database outage long enough for a doubling back-off to grow, the
// wake-up listener subscribes again within a few seconds of the database's
// return, says so in the log, and /readyz turns 200. Before, its back-off
// doubled up to 30 s, and /readyz stayed 503 ("listener not subscribed")
// for as long after the database was back.
func TestRunListenerBackSoonAfterTheDatabase(t *testing.T) {
	t.Parallel()
	dbURL, schema := migrated(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, u.Host)
	u.Host = proxy.addr()
	rr := startRelay(t, "--database-url", u.String(), "--schema", schema, "--transport", "events="+startNATSServer(t), "--http", "127.0.0.1:0")
	rr.waitReadyz(t, 10*time.Second, http.StatusOK, `"ready":true`)
	proxy.setDown(true)
	rr.waitReadyz(t, 30*time.Second, http.StatusServiceUnavailable, `{"name":"database","ok":false`)
	// The outage's length, which the promise is about, not a wait for an
	// event (the listener's tries are not logged): after 20 s, a back-off
	// doubling from 0.5 s up to 30 s, as before, has its tries 16 s apart,
	// the next some 10 s after the return; one that stops at 2 s tries
	// within 2 s.
	time.Sleep(20 * time.Second)
	proxy.setDown(false)
	// The listener's tries are 2 s apart at most; 8 s leaves room for a
	// busy machine (a doubling back-off was 16 s apart by now).
	rr.waitReadyz(t, 8*time.Second, http.StatusOK, `"ready":true`, `"listener","ok":true`)
	if log := rr.stderr.String(); !strings.Contains(log, "wake-up listener subscribed again") {
		t.Errorf("the listener's return is not logged:\n%s", log)
	}
	rr.stop(t)
}

// A destination the broker refuses (a subject no stream captures) is
// logged once as paused, not once per held lane and try: before, 79 keys
// on it logged one warning per lane about every second. /readyz names it.
func TestRunLogsAMisroutedDestinationOnce(t *testing.T) {
	t.Parallel()
	dbURL, schema := migrated(t)
	db := testdb.Open(t, "pgx")
	natsURL := startNATSServer(t)
	natsStream(t, natsURL, "ROUTED", "routed.>")
	rr := startRelay(t, "--database-url", dbURL, "--schema", schema, "--transport", "events="+natsURL+"?stream=ROUTED", "--http", "127.0.0.1:0")
	w := relayWriter(t, db, schema, relayer.LanesDefault, func(r *relayer.Routes) error {
		if err := relayer.AddType[relayActivity](r, relayer.Route{Transport: "events", Destination: "nowhere.activity", Ordered: true}); err != nil {
			return err
		}
		return relayer.AddType[relayPlaced](r, relayer.Route{Transport: "events", Destination: "nowhere.placed"})
	})
	err := w.RunInTx(t.Context(), db, nil, func(tx *enlist.Tx) error {
		for k := range 79 {
			err := tx.PublishAll(t.Context(), relayer.NewOutgoing(relayActivity{k}, relayer.Key(fmt.Sprintf("key-%d", k))), relayer.NewOutgoing(relayPlaced{k}))
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		log := rr.stderr.String()
		return strings.Contains(log, "nowhere.activity") && strings.Contains(log, "nowhere.placed")
	}, "the log to name both destinations: %s", rr.stderr)
	// An absence over two probes of each paused destination (1 s, then 2 s
	// after the pause began, jittered by a tenth): no second warning or
	// error names it. Before, each lane logged one about every second.
	time.Sleep(4 * time.Second)
	log := rr.stderr.String()
	for _, d := range []string{"nowhere.activity", "nowhere.placed"} {
		if n := linesWith(log, "level=WARN", d) + linesWith(log, "level=ERROR", d); n != 1 {
			t.Errorf("%d warnings and errors name %s in about 4 s, want 1:\n%s", n, d, log)
		}
	}
	rr.waitReadyz(t, 10*time.Second, http.StatusServiceUnavailable, `"destination":"nowhere.activity"`, `"destination":"nowhere.placed"`)
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM "` + schema + `".outbox WHERE attempts = 0`).Scan(&n); err != nil || n != 2*79 {
		t.Errorf("%d rows of %d wait with their attempts unspent (%v)", n, 2*79, err)
	}
	rr.stop(t)
}
