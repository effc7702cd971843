// Package console_test drives the operator's console in a real browser:
// headless Chromium (Debian's chromium package, installed by the test when
// it runs as root and the package is missing) against a console on a test
// database with parked keys and dead letters. It clicks retry, skip and
// requeue, and checks both the page and the tables.
package console_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/console"
	"github.com/relayer-go/relayer/internal/testkit/consolefixture"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

var screenshots = flag.String("screenshots", "", "directory to save a PNG of each console page in (docs/console refreshes the README's)")

func TestMain(m *testing.M) { testdb.Main(m) }

// chromium returns the path of Debian's Chromium, installing the package
// first when the test runs as root and it is missing. Without it the test
// is skipped, or fails under CI=true.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	reason := "no chromium binary"
	if os.Geteuid() == 0 {
		if aptGet, err := exec.LookPath("apt-get"); err == nil {
			t.Log("installing Debian's chromium package with apt-get (a few minutes)")
			for _, args := range [][]string{{"update"}, {"install", "-y", "-o", "DPkg::Lock::Timeout=600", "chromium"}} {
				if out, err := exec.Command(aptGet, args...).CombinedOutput(); err != nil {
					reason = fmt.Sprintf("apt-get %s failed: %v\n%s", strings.Join(args, " "), err, tail(string(out)))
					break
				}
			}
			if p, err := exec.LookPath("chromium"); err == nil {
				return p
			}
		} else {
			reason += " and no apt-get to install it"
		}
	} else {
		reason += " (not installing it: not running as root)"
	}
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatalf("%s: install Debian's chromium package (failing rather than skipping because CI=true)", reason)
	}
	t.Skipf("%s: install Debian's chromium package to run the browser test", reason)
	return ""
}

func tail(s string) string {
	if len(s) > 2000 {
		return s[len(s)-2000:]
	}
	return s
}

// browser is a headless Chromium tab that accepts confirm dialogs and
// records script errors and console errors (such as content security
// policy violations).
type browser struct {
	ctx    context.Context
	mu     sync.Mutex
	errors []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 860),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	b := &browser{ctx: ctx}
	if _, err := chromedp.Call(ctx, log.Enable, cdp.Empty{}); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	err := chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *page.EventJavascriptDialogOpening:
			go chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		case *runtime.EventExceptionThrown:
			b.record(fmt.Sprintf("exception: %s", ev.ExceptionDetails.Text))
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.EntryLevelError {
				b.record(fmt.Sprintf("console: %s (%s)", ev.Entry.Text, ev.Entry.URL))
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *browser) record(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errors = append(b.errors, s)
}

// run runs steps, within a minute.
func (b *browser) run(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// text returns the text of the first element matching the CSS selector sel.
func (b *browser) text(t *testing.T, sel string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	for attempt := 1; ; attempt++ {
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		// A node found in a document the browser then replaced (a page
		// that had just loaded when the read began): read the new one.
		if err != nil && attempt < 3 && strings.Contains(err.Error(), "No node with given id found") {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
		return s
	}
}

// shoot saves a full-page screenshot as name.png when -screenshots is set.
func (b *browser) shoot(t *testing.T, name string) {
	t.Helper()
	if *screenshots == "" {
		return
	}
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(*screenshots, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*screenshots, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// traffic writes and delivers rows while it runs, so that the overview's
// chart has something to show.
func traffic(ctx context.Context, t *testing.T, fx *consolefixture.Fixture) {
	table := fmt.Sprintf(`"%s"."%soutbox"`, fx.Opts.Schema, fx.Opts.TablePrefix)
	for i := 0; ctx.Err() == nil; i++ {
		msgs := make([]relayer.Message, 20+i%15)
		for j := range msgs {
			msgs[j] = relayer.Message{ID: uuid.Must(relayer.NewID()), Type: "orders.Placed", Transport: "nats",
				Destination: "orders.placed", Body: []byte(consolefixture.Body)}
		}
		if err := fx.Store.Insert(ctx, msgs); err != nil && ctx.Err() == nil {
			t.Errorf("traffic: %v", err)
			return
		}
		_, err := fx.DB.ExecContext(ctx, `DELETE FROM `+table+` WHERE id = ANY(ARRAY(
			SELECT id FROM `+table+` WHERE destination = 'orders.placed' AND message_type = 'orders.Placed' ORDER BY id LIMIT 22))`)
		if err != nil && ctx.Err() == nil {
			t.Errorf("traffic: %v", err)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func TestConsoleInBrowser(t *testing.T) {
	b := newBrowser(t)
	db := testdb.Open(t, "pgx")
	opts := store.Tables{Schema: testdb.NewSchema(t), TablePrefix: "billing_"}
	if _, err := store.Migrate(context.Background(), db, opts); err != nil {
		t.Fatal(err)
	}
	fx := consolefixture.Seed(t, db, opts)
	c, err := console.New(db, opts, console.Options{ShowBodies: true, Refresh: time.Minute, SampleEvery: time.Second,
		ListLimit: 4, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/outbox/", http.StripPrefix("/ops/outbox", c))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	base := srv.URL + "/ops/outbox/"
	ctx := context.Background()

	// Overview, reloaded while messages flow, so that its chart has points.
	tctx, stopTraffic := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { traffic(tctx, t, fx) })
	b.run(t, "open the overview", chromedp.Navigate(base), chromedp.WaitVisible(chromedp.CSS("h1")))
	for range 6 {
		time.Sleep(time.Second)
		b.run(t, "reload the overview", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("h1")))
	}
	stopTraffic()
	wg.Wait()
	if got := b.text(t, "main"); !strings.Contains(got, "Backlog by destination") || !strings.Contains(got, "customer-activity") ||
		!strings.Contains(got, "amqp: connection refused") || !strings.Contains(got, "blocked") || !strings.Contains(got, "waiting for retry") {
		t.Errorf("overview shows:\n%s", got)
	}
	points, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.querySelectorAll("figure.chart polyline").length`))
	if err != nil {
		t.Fatal(err)
	}
	if points != 2 {
		t.Errorf("the throughput chart has %d lines, want written and delivered", points)
	}
	axes, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`Array.from(document.querySelectorAll("figure.chart g.axes text")).map(t => t.textContent).join(" ")`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(axes, "msg/s") || !strings.Contains(axes, "now") || !strings.Contains(axes, "0 ") {
		t.Errorf("the throughput chart's axes read %q, want a rate axis from 0 in msg/s and a time axis to now", axes)
	}
	b.shoot(t, "overview")

	// Lanes, through the navigation.
	b.run(t, "open lanes", chromedp.Click(chromedp.CSS(`nav a[href="lanes"]`)), chromedp.WaitVisible(chromedp.CSS(`nav a.here[href="lanes"]`)))
	if got := b.text(t, "main"); !strings.Contains(got, "billing-7f9c ordered-1") || !strings.Contains(got, "billing-2b41 ordered-1") {
		t.Errorf("lanes page shows:\n%s", got)
	}
	b.shoot(t, "lanes")

	// Parked keys: retry one, skip another (confirming the dialog).
	b.run(t, "open parked keys", chromedp.Click(chromedp.CSS(`nav a[href="parked"]`)), chromedp.WaitVisible(chromedp.CSS(`nav a.here[href="parked"]`)))
	got := b.text(t, "main")
	if !strings.Contains(got, consolefixture.XSS) || !strings.Contains(got, "account 77 is closed") || !strings.Contains(got, "waiting") {
		t.Errorf("parked page shows:\n%s", got)
	}
	waiting, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`Array.from(document.querySelectorAll("tbody tr")).
		filter(r => r.querySelector("td.key").textContent.includes("<script>")).map(r => r.children[6].textContent).join(",")`))
	if err != nil || waiting != "1" {
		t.Errorf("the key with one message behind its head shows %q waiting (%v)", waiting, err)
	}
	b.shoot(t, "parked")
	b.run(t, "retry account-77",
		chromedp.Click(`//tr[td[@class="key" and text()="account-77"]]//button[@class="retry"]`),
		chromedp.WaitVisible(chromedp.CSS(".flash")))
	if f := b.text(t, ".flash"); !strings.Contains(f, "released 1 parked key") {
		t.Errorf("after retry the page says %q", f)
	}
	if keys, err := fx.Store.ParkedKeys(ctx, store.ParkedFilter{Key: "account-77"}, 10); err != nil || len(keys) != 0 {
		t.Errorf("account-77 still parked after retry: %v, %v", keys, err)
	}
	// The outcome is announced once: a reload (as the page's refresh does)
	// shows the page without it.
	b.run(t, "reload after the retry", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("h1")))
	if n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.querySelectorAll(".flash").length`)); err != nil || n != 0 {
		t.Errorf("after a reload the retry's outcome is still shown (%d, %v)", n, err)
	}
	b.run(t, "skip the key with markup in it",
		chromedp.Click(`//tr[td[@class="key" and contains(text(), "<script>")]]//button[@class="skip"]`),
		chromedp.WaitVisible(chromedp.CSS(".flash")),
		chromedp.WaitNotPresent(`//td[@class="key" and contains(text(), "<script>")]`))
	if f := b.text(t, ".flash"); !strings.Contains(f, "moved 1 parked head") {
		t.Errorf("after skip the page says %q", f)
	}
	skipped, err := fx.Store.DeadLetters(ctx, store.DeadFilter{IDs: []uuid.UUID{fx.Parked[0].ID}}, 1)
	if err != nil || len(skipped) != 1 || skipped[0].Reason != store.ReasonSkipped {
		t.Errorf("the skipped head is not a dead letter: %+v, %v", skipped, err)
	}

	// Held keys: a consumer's key held behind a failing message; skip its
	// first message (confirming the dialog).
	heldTable := pgx.Identifier{opts.Schema, opts.TablePrefix + "inbox_held"}.Sanitize()
	if _, err := db.ExecContext(ctx, `INSERT INTO `+heldTable+` (consumer, ordering_key, attempts, last_error)
VALUES ('invoicing', 'order-9', 4, 'pdf service down')`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO `+pgx.Identifier{opts.Schema, opts.TablePrefix + "inbox_waiting"}.Sanitize()+`
    (consumer, ordering_key, message_id, message_type, destination, headers, body)
VALUES ('invoicing', 'order-9', gen_random_uuid(), 'invoices.Requested', 'invoices', '\x0100000000000000', '')`); err != nil {
		t.Fatal(err)
	}
	b.run(t, "open held keys", chromedp.Click(chromedp.CSS(`nav a[href="held"]`)), chromedp.WaitVisible(chromedp.CSS(`nav a.here[href="held"]`)))
	if got := b.text(t, "main"); !strings.Contains(got, "invoicing") || !strings.Contains(got, "order-9") || !strings.Contains(got, "pdf service down") {
		t.Errorf("held keys page shows:\n%s", got)
	}
	b.shoot(t, "held")
	b.run(t, "skip the held key's first message",
		chromedp.Click(`//tr[td[@class="key" and text()="order-9"]]//button[@class="skip"]`),
		chromedp.WaitVisible(chromedp.CSS(".flash")))
	if f := b.text(t, ".flash"); !strings.Contains(f, "skipping the first message of 1 held key") {
		t.Errorf("after skip the page says %q", f)
	}
	var skip bool
	if err := db.QueryRowContext(ctx, `SELECT skip_message IS NOT NULL FROM `+heldTable).Scan(&skip); err != nil || !skip {
		t.Errorf("the held key is not marked for skipping: %v, %v", skip, err)
	}

	// Dead letters, 4 to a page (the skipped head first, the newest): the
	// next page and back.
	b.run(t, "open dead letters", chromedp.Click(chromedp.CSS(`nav a[href="dead"]`)), chromedp.WaitVisible(chromedp.CSS(`nav a.here[href="dead"]`)))
	b.shoot(t, "dead")
	last := fx.Dead[3].ID.String()
	if got := b.text(t, "main"); strings.Contains(got, last) {
		t.Errorf("the first page of 4 dead letters shows the fifth")
	}
	b.run(t, "next page of dead letters", chromedp.Click(chromedp.CSS(`a.next`)),
		chromedp.WaitVisible(chromedp.CSS(`a[href="message?id=`+last+`"]`)))
	b.run(t, "back to the first page", chromedp.Click(chromedp.CSS(`a.first`)),
		chromedp.WaitNotPresent(chromedp.CSS(`a[href="message?id=`+last+`"]`)))

	// Select one dead letter and requeue it.
	requeued := fx.Dead[2].ID.String()
	b.run(t, "requeue one dead letter",
		chromedp.Click(chromedp.CSS(`input[name="id"][value="`+requeued+`"]`)),
		chromedp.Click(chromedp.CSS(`button.requeue`)),
		chromedp.WaitVisible(chromedp.CSS(".flash")))
	if f := b.text(t, ".flash"); !strings.Contains(f, "requeued 1 dead letter") {
		t.Errorf("after requeue the page says %q", f)
	}
	if _, _, found, err := fx.Store.Message(ctx, fx.Dead[2].ID); err != nil || !found {
		t.Errorf("the requeued message is not in the outbox: %v, %v", found, err)
	}
	if got := b.text(t, "main"); strings.Contains(got, requeued) {
		t.Errorf("the requeued message is still listed as dead")
	}

	// Dead letters of one reason, through the filter's menu.
	b.run(t, "filter the dead letters by reason",
		chromedp.SetValue(chromedp.CSS(`select[name="reason"]`), store.ReasonExhausted),
		chromedp.Click(chromedp.CSS(`form.filter button[type="submit"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(`a[href="message?id=`+fx.Dead[3].ID.String()+`"]`)),
		// Something of the new page, not just the old one gone: the
		// document may be between the two.
		chromedp.WaitVisible(chromedp.CSS(`a[href="message?id=`+fx.Dead[0].ID.String()+`"]`)))
	if got := b.text(t, "main"); !strings.Contains(got, fx.Dead[0].ID.String()) || strings.Contains(got, fx.Dead[3].ID.String()) {
		t.Errorf("dead letters filtered by reason exhausted show:\n%s", got)
	}

	// A dead letter purged from its own page.
	purged := fx.Dead[3].ID.String()
	b.run(t, "purge a dead letter from its page", chromedp.Navigate(base+"message?id="+purged), chromedp.WaitVisible(chromedp.CSS("h1")),
		chromedp.Click(chromedp.CSS(`button.purge`)), chromedp.WaitVisible(chromedp.CSS(".flash")))
	if f := b.text(t, ".flash"); !strings.Contains(f, "purged 1 dead letter") {
		t.Errorf("after purge from the message page the page says %q", f)
	}

	// A message, from its link.
	b.run(t, "open a message", chromedp.Navigate(base+"parked"), chromedp.WaitVisible(chromedp.CSS("h1")),
		chromedp.Click(chromedp.CSS(`a.id[href="message?id=`+fx.Parked[2].ID.String()+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`pre.body`)))
	if got := b.text(t, "main"); !strings.Contains(got, "outbox: parked") || !strings.Contains(got, "traceparent") ||
		!strings.Contains(got, "a@example.com") {
		t.Errorf("message page shows:\n%s", got)
	}
	b.shoot(t, "message")

	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errors {
		t.Errorf("the browser reported %s", e)
	}
}
