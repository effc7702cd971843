package console_test

import (
	"context"
	"database/sql"
	"errors"
	"html"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/console"
	"github.com/relayer-go/relayer/internal/testkit/consolefixture"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/internal/vocab"
	"github.com/relayer-go/relayer/store"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// fixture is an outbox filled by consolefixture.
type fixture struct {
	*consolefixture.Fixture
	st *store.Store
}

const xss = consolefixture.XSS

func newFixture(t *testing.T) *fixture {
	t.Helper()
	db := testdb.Open(t, "pgx")
	opts := store.Tables{Schema: testdb.NewSchema(t), TablePrefix: "ob_"}
	if _, err := store.Migrate(context.Background(), db, opts); err != nil {
		t.Fatal(err)
	}
	fx := consolefixture.Seed(t, db, opts)
	return &fixture{Fixture: fx, st: fx.Store}
}

func (f *fixture) console(t *testing.T, opts console.Options) *console.Console {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c, err := console.New(f.DB, f.Opts, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// client is a browser-like client of a console server: it keeps cookies,
// does not follow redirects, and sends same-origin fetch metadata.
type client struct {
	t    *testing.T
	srv  *httptest.Server
	http *http.Client
	base string
}

func newClient(t *testing.T, h http.Handler, mount string) *client {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(mount+"/", http.StripPrefix(mount, h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	jar := newJar()
	return &client{t: t, srv: srv, base: srv.URL + mount + "/", http: &http.Client{
		Jar:           jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

func (c *client) do(req *http.Request) (int, string, http.Header) {
	c.t.Helper()
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func (c *client) get(path string, hdr ...string) (int, string, http.Header) {
	c.t.Helper()
	req, _ := http.NewRequest("GET", c.base+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return c.do(req)
}

// post submits a form as a page of the console would: same origin.
func (c *client) post(path string, form url.Values, hdr ...string) (int, string, http.Header) {
	c.t.Helper()
	req, _ := http.NewRequest("POST", c.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set("Origin", c.srv.URL)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return c.do(req)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf reads the CSRF token from a page's forms.
func (c *client) csrf(page string) string {
	c.t.Helper()
	_, body, _ := c.get(page)
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		c.t.Fatalf("no CSRF field on %s", page)
	}
	return m[1]
}

func TestPagesShowTheOutbox(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := newClient(t, f.console(t, console.Options{}), "/ops/outbox")
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"", []string{"Backlog by destination", "orders.placed", "billing.reminders", "ledger", "audit", "parked (3 keys)",
			"amqp: connection refused (broker unavailable)", "exhausted"}},
		{"lanes", []string{"Lanes", "Ordered workers", "billing-7f9c ordered-1", "billing-2b41 ordered-1", "recovery"}},
		{"parked", []string{"ledger.Posted", f.Parked[0].ID.String(), "account 77 is closed", `value="retry"`, `value="skip"`}},
		{"dead", []string{"audit.Logged", f.Dead[0].ID.String(), f.Dead[3].ID.String(), "permanent", `value="requeue"`, `value="purge"`}},
		{"message?id=" + f.Parked[0].ID.String(), []string{"outbox: parked", "content-type", "application/json", "0x000102", "Hidden: bodies may hold personal data"}},
		{"message?id=" + f.Dead[2].ID.String(), []string{"dead letters: dead (permanent)"}},
	} {
		status, body, hdr := c.get(tc.path)
		if status != http.StatusOK {
			t.Errorf("GET %q: %d\n%s", tc.path, status, body)
			continue
		}
		if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
			t.Errorf("GET %q: Content-Type %q", tc.path, ct)
		}
		for _, w := range tc.want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %q: no %q in the page", tc.path, w)
			}
		}
		if strings.Contains(body, xss) {
			t.Errorf("GET %q: the page prints stored text unescaped", tc.path)
		}
		if strings.Contains(body, "a@example.com") {
			t.Errorf("GET %q: a body is shown without ShowBodies", tc.path)
		}
	}
	if status, _, _ := c.get("message?id=" + uuid.NewString()); status != http.StatusNotFound {
		t.Errorf("an unknown message: %d, want 404", status)
	}
	if status, body, _ := c.get("message?id=not-a-uuid"); status != http.StatusBadRequest || !strings.Contains(body, "is not a message id") {
		t.Errorf("a bad id: %d", status)
	}
	if status, _, _ := c.get("assets/console.css"); status != http.StatusOK {
		t.Errorf("the stylesheet: %d", status)
	}
}

func TestBodiesOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := newClient(t, f.console(t, console.Options{ShowBodies: true}), "")
	_, body, _ := c.get("message?id=" + f.Plain.ID.String())
	if !strings.Contains(body, "a@example.com") {
		t.Errorf("ShowBodies: the body is not shown")
	}
}

func TestActionsRedriveAndReport(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var logs strings.Builder
	logger := slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, nil))
	c := newClient(t, f.console(t, console.Options{Logger: logger}), "")
	ctx := context.Background()
	token := c.csrf("parked")

	status, _, hdr := c.post("parked", url.Values{"csrf": {token}, "op": {"retry"}, "key": {f.Parked[0].Key}})
	if status != http.StatusSeeOther || hdr.Get("Location") != "parked?did=retry&n=1" {
		t.Fatalf("retry: %d to %q", status, hdr.Get("Location"))
	}
	if keys, _ := f.st.ParkedKeys(ctx, store.ParkedFilter{}, 10); len(keys) != 2 {
		t.Errorf("after retry of one key, %d parked keys, want the other 2", len(keys))
	}
	_, body, _ := c.get("parked?did=retry&n=1")
	if !strings.Contains(body, "released 1 parked key(s)") {
		t.Errorf("the outcome is not shown")
	}
	// Retrying again touches nothing: the action is idempotent.
	if _, _, hdr := c.post("parked", url.Values{"csrf": {token}, "op": {"retry"}, "key": {f.Parked[0].Key}}); hdr.Get("Location") != "parked?did=retry&n=0" {
		t.Errorf("second retry: %q", hdr.Get("Location"))
	}

	_, _, hdr = c.post("dead", url.Values{"csrf": {token}, "op": {"requeue"}, "id": {f.Dead[0].ID.String()}})
	if hdr.Get("Location") != "dead?did=requeue&n=1" {
		t.Fatalf("requeue: %q", hdr.Get("Location"))
	}
	if _, _, found, _ := f.st.Message(ctx, f.Dead[0].ID); !found {
		t.Errorf("the requeued message is not in the outbox")
	}
	// all=1 acts on every dead letter the filter matches, selected or not.
	_, _, hdr = c.post("dead", url.Values{"csrf": {token}, "op": {"purge"}, "all": {"1"}, "type": {"audit.Logged"}, "id": {f.Dead[0].ID.String()}})
	if hdr.Get("Location") != "dead?did=purge&n=1" {
		t.Fatalf("purge all of a type: %q", hdr.Get("Location"))
	}
	if n, _ := f.st.CountDead(ctx); n != 2 {
		t.Errorf("%d dead letters after the purge, want the 2 of another type", n)
	}
	if status, _, _ := c.post("dead", url.Values{"csrf": {token}, "op": {"purge"}}); status != http.StatusBadRequest {
		t.Errorf("a purge naming nothing: %d, want 400", status)
	}
	for _, want := range []string{"action=\"parked retry\"", "rows=1", "action=\"dead requeue\"", "action=\"dead purge\"", "remote=127.0.0.1"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log has no %s:\n%s", want, logs.String())
		}
	}
}

func TestSkipMovesTheHead(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := newClient(t, f.console(t, console.Options{}), "")
	_, _, hdr := c.post("parked", url.Values{"csrf": {c.csrf("parked")}, "op": {"skip"}, "key": {f.Parked[0].Key}})
	if hdr.Get("Location") != "parked?did=skip&n=1" {
		t.Fatalf("skip: %q", hdr.Get("Location"))
	}
	letters, err := f.st.DeadLetters(context.Background(), store.DeadFilter{IDs: []uuid.UUID{f.Parked[0].ID}}, 1)
	if err != nil || len(letters) != 1 || letters[0].Reason != store.ReasonSkipped {
		t.Errorf("skipped head: %+v, %v", letters, err)
	}
}

// A cross-site form post changes nothing: without the CSRF token, and from
// another origin even with it.
func TestCrossSitePostsChangeNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := newClient(t, f.console(t, console.Options{}), "")
	token := c.csrf("dead")
	purge := url.Values{"op": {"purge"}, "all": {"1"}}
	if status, _, _ := c.post("dead", purge); status != http.StatusForbidden {
		t.Errorf("no CSRF token: %d, want 403", status)
	}
	purge.Set("csrf", "forged")
	if status, _, _ := c.post("dead", purge); status != http.StatusForbidden {
		t.Errorf("a wrong CSRF token: %d, want 403", status)
	}
	purge.Set("csrf", token)
	if status, _, _ := c.post("dead", purge, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"); status != http.StatusForbidden {
		t.Errorf("from another site: %d, want 403", status)
	}
	if n, _ := f.st.CountDead(context.Background()); n != 4 {
		t.Errorf("%d dead letters left, want all 4", n)
	}
}

func TestReadOnlyHidesAndRefusesActions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := newClient(t, f.console(t, console.Options{ReadOnly: true}), "")
	for _, page := range []string{"parked", "dead"} {
		_, body, _ := c.get(page)
		if strings.Contains(body, `method="post"`) {
			t.Errorf("%s: a read-only console shows an action", page)
		}
		if !strings.Contains(body, "read-only") {
			t.Errorf("%s: the page does not say it is read-only", page)
		}
	}
	if status, _, _ := c.post("dead", url.Values{"op": {"purge"}, "all": {"1"}}); status != http.StatusForbidden {
		t.Errorf("POST to a read-only console: %d, want 403", status)
	}
	if n, _ := f.st.CountDead(context.Background()); n != 4 {
		t.Errorf("%d dead letters left, want all 4", n)
	}
}

func TestTokenGuardsEveryRequest(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := newClient(t, f.console(t, console.Options{Token: "s3cret"}), "/console")
	for _, path := range []string{"", "dead", "assets/console.css", "message?id=" + f.Plain.ID.String()} {
		if status, _, hdr := c.get(path); status != http.StatusUnauthorized || hdr.Get("WWW-Authenticate") == "" {
			t.Errorf("GET %q without the token: %d, want 401", path, status)
		}
	}
	if status, _, _ := c.get("", "Authorization", "Bearer wrong"); status != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d, want 401", status)
	}
	if status, _, _ := c.post("dead", url.Values{"op": {"purge"}, "all": {"1"}}); status != http.StatusUnauthorized {
		t.Errorf("POST without the token: %d, want 401", status)
	}
	if status, _, _ := c.get("dead", "Authorization", "Bearer s3cret"); status != http.StatusOK {
		t.Errorf("with the bearer token: %d", status)
	}
	status, _, hdr := c.get("dead?token=s3cret&type=audit.Logged")
	if status != http.StatusSeeOther || hdr.Get("Location") != "dead?type=audit.Logged" {
		t.Fatalf("?token=: %d to %q, want a redirect without the token", status, hdr.Get("Location"))
	}
	if status, body, _ := c.get("dead?type=audit.Logged"); status != http.StatusOK || !strings.Contains(body, f.Dead[0].ID.String()) || strings.Contains(body, f.Dead[2].ID.String()) {
		t.Errorf("with the cookie: %d", status)
	}
	if n, _ := f.st.CountDead(context.Background()); n != 4 {
		t.Errorf("%d dead letters left, want all 4", n)
	}
}

func TestOptionsValidated(t *testing.T) {
	db := &sql.DB{}
	for _, o := range []console.Options{{Refresh: time.Millisecond}, {Refresh: 2 * time.Hour}, {ListLimit: -1}, {ListLimit: 10_001}, {SampleEvery: time.Millisecond}, {SampleEvery: time.Hour},
		{AllowedHosts: []string{""}}, {AllowedHosts: []string{"*"}}, {AllowedHosts: []string{"*.example.com"}}, {AllowedHosts: []string{"http://ops.example.com"}},
		{AllowedHosts: []string{"ops.example.com/console"}}, {AllowedHosts: []string{"ops.example.com:0"}}, {AllowedHosts: []string{"ops.example.com:99999"}},
		{AllowedHosts: []string{":8080"}}, {QueryTimeout: time.Millisecond}, {QueryTimeout: time.Hour}, {QueryTimeout: -time.Second},
		{MaxConcurrent: -1}, {MaxConcurrent: 101}} {
		if _, err := console.New(db, store.Tables{}, o); !errors.Is(err, console.ErrInvalidOptions) {
			t.Errorf("%+v: %v, want ErrInvalidOptions", o, err)
		}
	}
	if _, err := console.New(db, store.Tables{Schema: `x"; DROP`}, console.Options{}); !errors.Is(err, store.ErrInvalidOptions) {
		t.Errorf("a bad schema: %v, want store.ErrInvalidOptions", err)
	}
	if _, err := console.New(nil, store.Tables{}, console.Options{}); !errors.Is(err, store.ErrNilDB) {
		t.Errorf("no database: %v", err)
	}
}

// Messages behind a parked key are blocked, not due, on the overview, and
// the parked keys page says how many wait behind each key.
func TestBlockedMessagesAndWaitingCounts(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := newClient(t, f.console(t, console.Options{}), "/ops/outbox")
	_, body, _ := c.get("")
	// The ledger's rows: two parked heads and, behind the first, one row
	// that is due by its own columns but blocked by its key.
	for _, want := range []string{
		`<td>ledger</td><td class="r">0</td><td class="r"><a href="parked?destination=ledger">1</a></td>`,
		"Blocked messages wait behind a key whose head is parked, waiting for its retry or for a paused destination",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("overview: no %q in the page", want)
		}
	}
	_, body, _ = c.get("parked")
	rows := strings.Split(body, "<tr>")
	waiting := map[string]string{}
	for _, p := range f.Parked {
		for _, row := range rows {
			if strings.Contains(row, p.ID.String()) {
				if i := strings.Index(row, ` ago</td><td class="r">`); i >= 0 {
					rest := row[i+len(` ago</td><td class="r">`):]
					waiting[p.ID.String()] = rest[:strings.Index(rest, "<")]
				}
			}
		}
	}
	want := map[string]string{f.Parked[0].ID.String(): "1", f.Parked[1].ID.String(): "0", f.Parked[2].ID.String(): "0"}
	if !maps.Equal(waiting, want) {
		t.Errorf("parked page: waiting per head %v, want %v", waiting, want)
	}
}

var nextLink = regexp.MustCompile(`<a class="next" href="([^"]+)">`)

// The list pages go on page by page, and the dead letters filter by
// reason; a bad cursor is refused with a reason.
func TestListsPageByPageAndFilterByReason(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := newClient(t, f.console(t, console.Options{ListLimit: 3}), "/ops/outbox")
	for _, tc := range []struct {
		page string
		want []string
	}{
		{"dead", []string{f.Dead[0].ID.String(), f.Dead[1].ID.String(), f.Dead[2].ID.String(), f.Dead[3].ID.String()}},
		{"parked", []string{f.Parked[0].ID.String(), f.Parked[1].ID.String(), f.Parked[2].ID.String()}},
	} {
		seen := map[string]int{}
		path, pages := tc.page, 0
		for path != "" && pages < 10 {
			status, body, _ := c.get(path)
			if status != http.StatusOK {
				t.Fatalf("GET %s: %d\n%s", path, status, body)
			}
			pages++
			for _, id := range tc.want {
				if strings.Contains(body, `href="message?id=`+id+`"`) {
					seen[id]++
				}
			}
			path = ""
			if m := nextLink.FindStringSubmatch(body); m != nil {
				path = html.UnescapeString(m[1])
				if !strings.Contains(path, "after=") {
					t.Errorf("%s: next page link %q has no cursor", tc.page, path)
				}
			}
		}
		for _, id := range tc.want {
			if seen[id] != 1 {
				t.Errorf("%s: %s listed on %d pages, want 1 (pages read: %d)", tc.page, id, seen[id], pages)
			}
		}
	}

	_, body, _ := c.get("dead?reason=" + store.ReasonPermanent)
	if !strings.Contains(body, f.Dead[2].ID.String()) || !strings.Contains(body, f.Dead[3].ID.String()) ||
		strings.Contains(body, `href="message?id=`+f.Dead[0].ID.String()) || !strings.Contains(body, "<option selected>permanent</option>") {
		t.Errorf("dead?reason=permanent does not list exactly the permanent dead letters:\n%s", body)
	}
	if status, body, _ := c.get("dead?after=yesterday"); status != http.StatusBadRequest || !strings.Contains(body, "page cursor") {
		t.Errorf("dead?after=yesterday: %d, want 400 naming the page cursor\n%s", status, body)
	}
}

// A dead letter's page offers requeue and purge; a parked head's, retry and
// skip of its key; and they work from there.
func TestMessagePageActions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := newClient(t, f.console(t, console.Options{}), "/ops/outbox")
	_, body, _ := c.get("message?id=" + f.Dead[1].ID.String())
	for _, want := range []string{`value="requeue"`, `value="purge"`} {
		if !strings.Contains(body, want) {
			t.Errorf("dead letter's page: no %s", want)
		}
	}
	_, body, _ = c.get("message?id=" + f.Parked[1].ID.String())
	for _, want := range []string{`value="retry"`, `value="skip"`, `value="account-77"`} {
		if !strings.Contains(body, want) {
			t.Errorf("parked head's page: no %s", want)
		}
	}
	if _, body, _ = c.get("message?id=" + f.Plain.ID.String()); strings.Contains(body, `value="retry"`) || strings.Contains(body, `value="requeue"`) {
		t.Errorf("a due message's page offers actions")
	}
	token := c.csrf("message?id=" + f.Dead[1].ID.String())
	if status, _, hdr := c.post("dead", url.Values{"csrf": {token}, "op": {"requeue"}, "id": {f.Dead[1].ID.String()}}); status != http.StatusSeeOther || hdr.Get("Location") != "dead?did=requeue&n=1" {
		t.Errorf("requeue from the message page: %d to %q", status, hdr.Get("Location"))
	}
	if _, _, found, err := f.st.Message(context.Background(), f.Dead[1].ID); err != nil || !found {
		t.Errorf("the requeued dead letter is not in the outbox: %t, %v", found, err)
	}
	ro := newClient(t, f.console(t, console.Options{ReadOnly: true}), "/ops/outbox")
	if _, body, _ = ro.get("message?id=" + f.Dead[0].ID.String()); strings.Contains(body, `value="requeue"`) {
		t.Errorf("a read-only console offers actions on the message page")
	}
}

// The overview names the backlog's classes in the words the relayer
// command uses: each is a column of the table by destination.
func TestOverviewSpeaksTheCommandsWords(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := newClient(t, f.console(t, console.Options{}), "/ops/outbox")
	_, body, _ := c.get("")
	for _, word := range vocab.All {
		if !strings.Contains(body, `<th class="r">`+word+`</th>`) {
			t.Errorf("the overview's table has no column %q", word)
		}
	}
}

// The held keys page lists the keys consumers hold, escaped, and retries
// or skips them; a read-only console offers neither.
func TestHeldKeysPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	held := `"` + f.Opts.Schema + `"."` + f.Opts.TablePrefix + `inbox_held"`
	waiting := `"` + f.Opts.Schema + `"."` + f.Opts.TablePrefix + `inbox_waiting"`
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := f.DB.Exec(q, args...); err != nil {
			t.Fatal(err)
		}
	}
	head := uuid.Must(relayer.NewID())
	exec(`INSERT INTO `+held+` (consumer, ordering_key, attempts, retry_at, last_error) VALUES ('billing', $1, 3, now() + interval '1 hour', $2)`,
		"cust-"+xss, "ledger "+xss)
	exec(`INSERT INTO `+waiting+` (consumer, ordering_key, message_id, message_type, destination, headers, body)
VALUES ('billing', $1, $2, 'orders.Placed', 'orders.placed', '\x0100000000000000', '')`, "cust-"+xss, head)
	c := newClient(t, f.console(t, console.Options{}), "")
	status, body, _ := c.get("held")
	if status != http.StatusOK || !strings.Contains(body, head.String()) || !strings.Contains(body, "billing") || strings.Contains(body, xss) {
		t.Fatalf("held page: %d; want billing's key with its first message, escaped:\n%s", status, body)
	}
	token := c.csrf("held")
	status, _, hdr := c.post("held", url.Values{"csrf": {token}, "op": {"retry"}, "consumer": {"billing"}, "key": {"cust-" + xss}})
	if status != http.StatusSeeOther || hdr.Get("Location") != "held?did=retry-held&n=1" {
		t.Fatalf("retry: %d to %q", status, hdr.Get("Location"))
	}
	var attempts int
	if err := f.DB.QueryRow(`SELECT attempts FROM ` + held).Scan(&attempts); err != nil || attempts != 0 {
		t.Errorf("after retry, attempts %d (%v), want 0", attempts, err)
	}
	if _, body, _ := c.get("held?did=retry-held&n=1"); !strings.Contains(body, "retried 1 held key(s)") {
		t.Error("the outcome is not shown")
	}
	status, _, hdr = c.post("held", url.Values{"csrf": {token}, "op": {"skip"}, "consumer": {"billing"}, "key": {"cust-" + xss}, "message": {head.String()}})
	if status != http.StatusSeeOther || hdr.Get("Location") != "held?did=skip-held&n=1" {
		t.Fatalf("skip: %d to %q", status, hdr.Get("Location"))
	}
	if _, body, _ := c.get("held"); !strings.Contains(body, "skipping") {
		t.Error("a skipped key does not say so")
	}
	if _, _, hdr := c.post("held", url.Values{"csrf": {token}, "op": {"skip"}, "consumer": {"billing"}, "key": {"cust-" + xss}, "message": {uuid.NewString()}}); hdr.Get("Location") != "held?did=skip-held&n=0" {
		t.Errorf("a skip naming another message than the first: %q, want nothing skipped", hdr.Get("Location"))
	}
	if status, _, _ := c.post("held", url.Values{"csrf": {token}, "op": {"skip"}, "key": {"k"}}); status != http.StatusBadRequest {
		t.Errorf("skip without a consumer: %d, want 400", status)
	}
	ro := newClient(t, f.console(t, console.Options{ReadOnly: true}), "")
	if _, body, _ := ro.get("held"); strings.Contains(body, `value="skip"`) {
		t.Error("a read-only console offers to skip")
	}
}
