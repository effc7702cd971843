package console_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relayer-go/relayer/console"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
)

// lock takes the fixture's tables (outbox, dead, …) in ACCESS EXCLUSIVE
// mode, in a transaction of its own, until release or the end of the test:
// every statement on them waits.
func (f *fixture) lock(t *testing.T, tables ...string) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := f.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(tables))
	for i, table := range tables {
		names[i] = fmt.Sprintf(`"%s"."%s%s"`, f.Opts.Schema, f.Opts.TablePrefix, table)
	}
	if _, err := tx.ExecContext(ctx, `LOCK TABLE `+strings.Join(names, ", ")+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	release = func() { tx.Rollback() }
	t.Cleanup(release)
	return release
}

// A request whose statements wait on a locked table ends at the query
// timeout with an error page, and its action changes nothing; once the
// lock is gone, the console answers again.
func TestSlowQueriesEndAtTheTimeout(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := newClient(t, f.console(t, console.Options{QueryTimeout: time.Second}), "")
	token := c.csrf("dead")
	release := f.lock(t, "outbox", "dead")
	for _, path := range []string{"", "dead", "message?id=" + f.Plain.ID.String()} {
		start := time.Now()
		status, body, _ := c.get(path)
		if took := time.Since(start); took > 4*time.Second {
			t.Errorf("GET %q took %s with a query timeout of 1s", path, took.Round(time.Millisecond))
		}
		if status != http.StatusServiceUnavailable || !strings.Contains(body, "did not answer within 1s") || !strings.Contains(body, "<h1>") {
			t.Errorf("GET %q on a locked table: %d, want 503 and a page that says why\n%.600s", path, status, body)
		}
	}
	start := time.Now()
	status, body, _ := c.post("dead", url.Values{"csrf": {token}, "op": {"purge"}, "all": {"1"}})
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("a purge took %s with a query timeout of 1s", took.Round(time.Millisecond))
	}
	if status != http.StatusServiceUnavailable || !strings.Contains(body, "did not answer within 1s") {
		t.Errorf("a purge on a locked table: %d %q, want 503", status, body)
	}
	release()
	if n, _ := f.st.CountDead(context.Background()); n != 4 {
		t.Errorf("%d dead letters left, want all 4", n)
	}
	if status, _, _ := c.get(""); status != http.StatusOK {
		t.Errorf("GET / once the lock is gone: %d", status)
	}
}

// Many page loads while the outbox is locked hold no more connections of
// the console's pool than MaxConcurrent (4 by default), however large the
// pool, and all end at the query timeout.
func TestConnectionsStayWithinMaxConcurrent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	db := testdb.Open(t, "pgx") // the caller's pool, up to 10 connections
	h, err := console.New(db, f.Opts, console.Options{QueryTimeout: 2 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, h, "")
	f.lock(t, "outbox")

	var peak int
	stop := make(chan struct{})
	var watch sync.WaitGroup
	watch.Go(func() {
		for {
			if s := db.Stats(); s.OpenConnections > peak {
				peak = s.OpenConnections
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	start := time.Now()
	statuses := make([]int, 20)
	var loads sync.WaitGroup
	for i := range statuses {
		loads.Go(func() {
			req, _ := http.NewRequest("GET", c.base, nil)
			resp, err := c.srv.Client().Do(req)
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
	if peak > console.MaxConcurrentDefault {
		t.Errorf("the console held %d connections at once, want at most %d (MaxConcurrent)", peak, console.MaxConcurrentDefault)
	}
	for i, s := range statuses {
		if s != http.StatusServiceUnavailable {
			t.Errorf("page load %d: %d, want 503", i, s)
		}
	}
	if took > 6*time.Second {
		t.Errorf("20 page loads took %s with a query timeout of 2s", took.Round(time.Millisecond))
	}
}

// Filter fields over FilterMaxBytes get 400 before the database is asked
// anything: this console's database is closed, so any query would fail
// otherwise.
func TestLongFiltersAreRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	closed := testdb.Open(t, "pgx")
	closed.Close()
	h, err := console.New(closed, f.Opts, console.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("k", console.FilterMaxBytes+1)
	c := newClient(t, h, "")
	for _, path := range []string{"dead?key=" + long, "parked?type=" + long, "dead?destination=" + long, "parked?older=" + long} {
		status, body, _ := c.get(path)
		if status != http.StatusBadRequest || !strings.Contains(body, "over the limit of 1024") {
			t.Errorf("GET %.40s…: %d, want 400 naming the limit\n%.400s", path, status, body)
		}
		if strings.Contains(body, long) {
			t.Errorf("GET %.40s…: the page shows the long field again", path)
		}
	}

	// At the limit, a filter is served; over it, an action is refused too.
	c = newClient(t, f.console(t, console.Options{}), "")
	if status, _, _ := c.get("dead?key=" + long[1:]); status != http.StatusOK {
		t.Errorf("a key of FilterMaxBytes: %d, want 200", status)
	}
	token := c.csrf("dead")
	if status, _, _ := c.post("dead", url.Values{"csrf": {token}, "op": {"purge"}, "all": {"1"}, "type": {long}}); status != http.StatusBadRequest {
		t.Errorf("a purge with a long type: %d, want 400", status)
	}
	if status, _, _ := c.post("parked", url.Values{"csrf": {token}, "op": {"retry"}, "key": {long}}); status != http.StatusBadRequest {
		t.Errorf("a retry with a long key: %d, want 400", status)
	}
	if n, _ := f.st.CountDead(context.Background()); n != 4 {
		t.Errorf("%d dead letters left, want all 4", n)
	}
}

// A request body over BodyMaxBytes gets 400, and its action is not taken.
func TestLargeBodiesAreRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := newClient(t, f.console(t, console.Options{}), "")
	form := url.Values{"csrf": {c.csrf("dead")}, "op": {"purge"}, "all": {"1"}, "pad": {strings.Repeat("x", console.BodyMaxBytes)}}
	status, body, _ := c.post("dead", form)
	if status != http.StatusBadRequest || !strings.Contains(body, "over 64 KiB") {
		t.Errorf("a body over 64 KiB: %d %q, want 400", status, body)
	}
	if n, _ := f.st.CountDead(context.Background()); n != 4 {
		t.Errorf("%d dead letters left, want all 4", n)
	}
}
