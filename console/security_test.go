package console_test

import (
	"fmt"
	"html"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/relayer-go/relayer/console"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

// databaseText are fragments of PostgreSQL's and the store's error texts,
// which a page must not show.
var databaseText = []string{"SQLSTATE", "invalid byte sequence", "does not exist", "store:", "pq:", "ERROR:"}

func showsDatabaseText(body string) string {
	for _, s := range databaseText {
		if strings.Contains(body, s) {
			return s
		}
	}
	return ""
}

// A filter or key with a NUL byte, or that is not UTF-8, gets 400 and no
// database error text.
func TestBadFilterTextIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := newClient(t, f.console(t, console.Options{}), "")
	for _, path := range []string{"dead?type=a%00b", "parked?key=%00", "dead?destination=%ff%fe", "dead?older=1%00d"} {
		status, body, _ := c.get(path)
		if status != http.StatusBadRequest {
			t.Errorf("GET %s: %d, want 400", path, status)
		}
		if s := showsDatabaseText(body); s != "" {
			t.Errorf("GET %s: the page shows the database's error (%q)", path, s)
		}
	}
	token := c.csrf("parked")
	status, body, _ := c.post("parked", url.Values{"csrf": {token}, "op": {"skip"}, "key": {"account\x00"}})
	if status != http.StatusBadRequest || showsDatabaseText(body) != "" {
		t.Errorf("skip a key with a NUL byte: %d %q, want 400 without the database's error", status, body)
	}
}

// A read or an action the database refuses is logged with the database's
// error; the page says only that it failed.
func TestDatabaseErrorsStayInTheLog(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var logs strings.Builder
	c := newClient(t, f.console(t, console.Options{Logger: slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, nil))}), "")
	token := c.csrf("dead")
	if _, err := f.DB.Exec(fmt.Sprintf(`DROP TABLE "%[1]s"."%[2]soutbox", "%[1]s"."%[2]sdead"`, f.Opts.Schema, f.Opts.TablePrefix)); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"", "lanes", "dead", "parked"} {
		status, body, _ := c.get(path)
		if status != http.StatusInternalServerError || !strings.Contains(body, "failed") {
			t.Errorf("GET %q on missing tables: %d, want 500 and a page that says it failed", path, status)
		}
		if s := showsDatabaseText(body); s != "" {
			t.Errorf("GET %q: the page shows the database's error (%q)", path, s)
		}
	}
	status, body, _ := c.post("dead", url.Values{"csrf": {token}, "op": {"purge"}, "all": {"1"}})
	if status != http.StatusInternalServerError || showsDatabaseText(body) != "" {
		t.Errorf("a purge on missing tables: %d %q, want 500 without the database's error", status, body)
	}
	if !strings.Contains(logs.String(), "does not exist") {
		t.Errorf("the log does not have the database's error:\n%s", logs.String())
	}
}

// assets/ serves the stylesheet and the script, and nothing else: no
// listing, no template.
func TestAssetsListNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := newClient(t, f.console(t, console.Options{}), "/ops")
	for path, want := range map[string]int{
		"assets/":            http.StatusNotFound,
		"assets/layout.html": http.StatusNotFound,
		"assets/nothing.css": http.StatusNotFound,
		"assets/console.css": http.StatusOK,
		"assets/console.js":  http.StatusOK,
	} {
		status, body, _ := c.get(path)
		if status != want {
			t.Errorf("GET %s: %d, want %d", path, status, want)
		}
		if want == http.StatusNotFound && (strings.Contains(body, "console.js") || strings.Contains(body, "{{")) {
			t.Errorf("GET %s shows what is embedded:\n%s", path, body)
		}
	}
}

// noRedirects is a client that keeps no cookies and follows no redirects.
func noRedirects(c *http.Client) *http.Client {
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}

// The ?token= redirect stays in the console, whatever the path. The
// console is served as "relayer console" serves it, with no ServeMux in
// front to clean the path first.
func TestTokenRedirectStaysLocal(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := httptest.NewServer(f.console(t, console.Options{Token: "s3cret"}))
	t.Cleanup(srv.Close)
	client := noRedirects(&http.Client{})
	for path, want := range map[string]string{
		`%5C%5Cevil.com?token=s3cret`:             "./",
		`%5Cevil.com?token=s3cret&type=x`:         "./?type=x",
		`A:?token=s3cret`:                         "./",
		`javascript:alert(1)?token=s3cret`:        "./",
		`%2F%2Fevil.com?token=s3cret`:             "evil.com",
		`x/..%2F..%2F?token=s3cret`:               "./",
		`dead?token=s3cret&type=audit.Logged`:     "dead?type=audit.Logged",
		`?token=s3cret`:                           "./",
		`message?id=1&token=s3cret`:               "message?id=1",
		`dead?token=s3cret&next=https://evil.com`: "dead?next=https%3A%2F%2Fevil.com",
	} {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.URL.Opaque = "/" + path[:strings.IndexByte(path, '?')]
		req.URL.RawQuery = path[strings.IndexByte(path, '?')+1:]
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		loc := resp.Header.Get("Location")
		if resp.StatusCode != http.StatusSeeOther || loc != want {
			t.Errorf("GET /%s: %d to %q, want a redirect to %q", path, resp.StatusCode, loc, want)
		}
		u, err := url.Parse(loc)
		if err != nil || u.Scheme != "" || u.Host != "" || strings.HasPrefix(loc, "//") || strings.Contains(loc, `\`) {
			t.Errorf("GET /%s: redirects to %q, outside the console", path, loc)
		}
	}
}

// The session cookie holds something derived from the token, not the
// token; it is HttpOnly and SameSite=Strict, and Secure over TLS.
func TestSessionCookieKeepsTheTokenSecret(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h := f.console(t, console.Options{Token: "s3cret"})
	tlsSrv := httptest.NewTLSServer(h)
	t.Cleanup(tlsSrv.Close)
	plain := httptest.NewServer(h)
	t.Cleanup(plain.Close)
	for _, tc := range []struct {
		name   string
		client *http.Client
		base   string
		secure bool
	}{{"TLS", noRedirects(tlsSrv.Client()), tlsSrv.URL, true}, {"plain HTTP", noRedirects(&http.Client{}), plain.URL, false}} {
		base := tc.base
		resp, err := tc.client.Get(base + "/dead?token=s3cret")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		var ck *http.Cookie
		for _, k := range resp.Cookies() {
			if k.Name == "relayer_console_token" {
				ck = k
			}
		}
		if ck == nil {
			t.Fatalf("%s: no session cookie after ?token=", tc.name)
		}
		if strings.Contains(ck.Value, "s3cret") {
			t.Errorf("%s: the cookie holds the token: %q", tc.name, ck.Value)
		}
		if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure != tc.secure {
			t.Errorf("%s: cookie HttpOnly %v, SameSite %v, Secure %v; want true, Strict, %v", tc.name, ck.HttpOnly, ck.SameSite, ck.Secure, tc.secure)
		}
		for value, want := range map[string]int{ck.Value: http.StatusOK, "s3cret": http.StatusUnauthorized} {
			req, _ := http.NewRequest("GET", base+"/dead", nil)
			req.AddCookie(&http.Cookie{Name: "relayer_console_token", Value: value})
			resp, err := tc.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("%s: cookie %q: %d, want %d", tc.name, value, resp.StatusCode, want)
			}
		}
	}
}

// On an outbox whose tables were never made, every page says which
// command makes them, and shows no database text.
func TestMissingTablesNameTheMigrateCommand(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, "pgx")
	schema := testdb.NewSchema(t) // made, empty
	con, err := console.New(db, store.Tables{Schema: schema, TablePrefix: "ob_"}, console.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, con, "")
	want := "relayer migrate --database-url URL --schema " + schema + " --prefix ob_"
	for _, path := range []string{"", "lanes", "dead", "parked"} {
		status, body, _ := c.get(path)
		if status != http.StatusInternalServerError || !strings.Contains(html.UnescapeString(body), want) {
			t.Errorf("GET %q on missing tables: %d, want 500 and a page naming %q", path, status, want)
		}
		if s := showsDatabaseText(body); s != "" {
			t.Errorf("GET %q: the page shows the database's error (%q)", path, s)
		}
	}
}

// The session cookie is scoped to the path the console is served under, so
// that the server's other handlers (a relay's /metrics, /readyz) never
// receive it; at the root, it is "/". Before, it was always "/".
func TestSessionCookieIsScopedToTheConsole(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h := f.console(t, console.Options{Token: "s3cret"})
	mux := http.NewServeMux()
	mux.Handle("/ops/console/", http.StripPrefix("/ops/console", h))
	for _, tc := range []struct {
		handler    http.Handler
		page, want string
	}{{mux, "/ops/console/dead?token=s3cret", "/ops/console/"}, {mux, "/ops/console/?token=s3cret", "/ops/console/"}, {h, "/dead?token=s3cret", "/"}} {
		srv := httptest.NewServer(tc.handler)
		resp, err := noRedirects(&http.Client{}).Get(srv.URL + tc.page)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		srv.Close()
		var path string
		for _, k := range resp.Cookies() {
			if k.Name == "relayer_console_token" {
				path = k.Path
			}
		}
		if path != tc.want {
			t.Errorf("GET %s: the session cookie's path is %q, want %q", tc.page, path, tc.want)
		}
	}
}
