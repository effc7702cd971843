package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/store"
)

// Defaults and limits of [Options].
const (
	RefreshDefault = 5 * time.Second
	RefreshMin     = time.Second
	RefreshMax     = time.Hour
	// ListLimitDefault is how many parked keys or dead letters a page lists.
	ListLimitDefault = 200
	ListLimitMax     = 10_000
	// SampleEveryDefault is how often the overview samples the outbox
	// table's activity for its throughput chart.
	SampleEveryDefault = 5 * time.Second
	SampleEveryMin     = time.Second
	SampleEveryMax     = time.Minute
	// QueryTimeoutDefault bounds the database work of one request: long
	// enough for every page of an outbox of millions of rows (they sample
	// large tables), short enough that a locked table or a busy database
	// does not hold the console's connections.
	QueryTimeoutDefault = 5 * time.Second
	QueryTimeoutMin     = 100 * time.Millisecond
	QueryTimeoutMax     = 10 * time.Minute
	// MaxConcurrentDefault is how many requests use the database at once:
	// a page takes one connection at a time, and an operator or two
	// browsing need no more, while the application keeps the rest.
	MaxConcurrentDefault = 4
	MaxConcurrentMax     = 100
)

// Limits of a request, answered with 400 Bad Request when passed, before
// the database is asked anything.
const (
	// FilterMaxBytes is the longest value of a filter field (type,
	// destination, key, older than) and of an action's key, in bytes:
	// 1,024, as [relayer.KeyMaxBytes] and [relayer.EndpointMaxBytes], so
	// that every key and destination an outbox can hold can be filtered.
	FilterMaxBytes = relayer.KeyMaxBytes
	// BodyMaxBytes is the largest request body: 64 KiB, room for a form
	// that selects well over a thousand dead letters.
	BodyMaxBytes = 64 << 10
)

// ErrInvalidOptions is returned by [New] for an option out of range.
var ErrInvalidOptions = errors.New("console: invalid options")

// tokenCookie carries proof of the access token after a visit with
// ?token=: its sessionValue, never the token itself.
const tokenCookie = "relayer_console_token"

// Options configure a console. The zero value is a console that shows
// everything but bodies, allows the actions, asks for no token, and answers
// to the loopback host names only: fit for a listener on the loopback
// interface only.
type Options struct {
	// Token, when set, is required on every request: in an
	// "Authorization: Bearer <token>" header, or by the cookie the console
	// sets when a page is opened with "?token=<token>" (and then redirects
	// to the same page of the console without it). The cookie holds an
	// HMAC-SHA256 keyed by the token, not the token; its path is the one
	// the console is served under (the prefix http.StripPrefix took off,
	// or "/"); it is HttpOnly, SameSite=Strict, and Secure when the
	// request came over TLS (to the console's own server: behind a proxy
	// that ends TLS, the console cannot tell). Requests without the token
	// get 401. Serve the console on any address but loopback with a token,
	// and over TLS. Default: none.
	Token string
	// ReadOnly hides every action and refuses every POST with 403.
	ReadOnly bool
	// ShowBodies shows message bodies (as text, or hex when they are not
	// UTF-8). They may hold personal data; by default they are hidden.
	ShowBodies bool
	// Refresh is how often pages reload themselves, 1 s to 1 h. Default: 5 s.
	Refresh time.Duration
	// ListLimit is how many parked keys or dead letters a page lists, 1 to
	// 10,000. Default: 200.
	ListLimit int
	// SampleEvery is the time between two samples of the outbox table's
	// insert and delete counters, from which the overview charts messages
	// written and delivered per second; the chart keeps the last 180
	// samples, taken all along by [Console.Run], else while the overview is
	// open. 1 s to 1 min. Default: 5 s.
	SampleEvery time.Duration
	// QueryTimeout bounds the database work of one page or action, from
	// the moment the request arrives, its wait for a free slot (see
	// MaxConcurrent) included: PostgreSQL ends a statement still running
	// then (statement_timeout, set for the request's transaction alone),
	// and the page says that the database did not answer in time, with
	// status 503. 100 ms to 10 min. Default: 5 s.
	QueryTimeout time.Duration
	// MaxConcurrent is how many requests may use the database at once, 1
	// to 100; the others wait for a slot, within their QueryTimeout. Each
	// request runs its statements in one transaction, on one connection,
	// so the console holds at most this many of db's connections. The
	// console does not size db, which is the caller's: "relayer console"
	// opens its own pool with as many connections as this (--max-conns).
	// Default: 4.
	MaxConcurrent int
	// AllowedHosts are the host names, besides the loopback ones, that a
	// request's Host header may name; any other request gets 421
	// Misdirected Request before anything else: no page, no CSRF token, no
	// action. This defeats DNS rebinding, where a page of another site
	// makes its own name resolve to the console's address: the browser
	// still sends that name as Host. An entry is a name or an IP address,
	// which accepts any port ("ops.example.com", "10.0.0.5",
	// "[2001:db8::1]"), or a name and a port, which accepts that port only
	// ("ops.example.com:8443"); names are compared without case. List every
	// name a browser or a proxy uses to reach the console. Default: none:
	// only localhost and the loopback addresses (127.0.0.1, [::1]) are
	// accepted, with any port.
	AllowedHosts []string
	// Logger receives a line for each action (who, what, how many rows),
	// for failed reads and for refused host names. Default: slog.Default().
	Logger *slog.Logger
}

// Validate reports the first option out of range.
func (o Options) Validate() error {
	switch {
	case o.Refresh != 0 && (o.Refresh < RefreshMin || o.Refresh > RefreshMax):
		return fmt.Errorf("%w: Refresh must be %s to %s, got %s", ErrInvalidOptions, RefreshMin, RefreshMax, o.Refresh)
	case o.ListLimit < 0 || o.ListLimit > ListLimitMax:
		return fmt.Errorf("%w: ListLimit must be 1 to %d, got %d", ErrInvalidOptions, ListLimitMax, o.ListLimit)
	case o.SampleEvery != 0 && (o.SampleEvery < SampleEveryMin || o.SampleEvery > SampleEveryMax):
		return fmt.Errorf("%w: SampleEvery must be %s to %s, got %s", ErrInvalidOptions, SampleEveryMin, SampleEveryMax, o.SampleEvery)
	case o.QueryTimeout != 0 && (o.QueryTimeout < QueryTimeoutMin || o.QueryTimeout > QueryTimeoutMax):
		return fmt.Errorf("%w: QueryTimeout must be %s to %s, got %s", ErrInvalidOptions, QueryTimeoutMin, QueryTimeoutMax, o.QueryTimeout)
	case o.MaxConcurrent < 0 || o.MaxConcurrent > MaxConcurrentMax:
		return fmt.Errorf("%w: MaxConcurrent must be 1 to %d, got %d", ErrInvalidOptions, MaxConcurrentMax, o.MaxConcurrent)
	}
	_, err := parseAllowedHosts(o.AllowedHosts)
	return err
}

//go:embed assets
var assets embed.FS

// Console serves the pages and actions of one outbox. It is an
// [http.Handler], safe for concurrent use.
type Console struct {
	db      *sql.DB
	store   *store.Store
	slots   chan struct{} // one per request using the database
	opts    Options
	pages   *template.Template
	csrfKey []byte
	samples *samples
	hosts   hostSet
	handler http.Handler
}

// New returns a console for the outbox whose tables are tables (schema and table
// prefix), reading and redriving through db. It validates everything and
// does not touch the database. A console needs only where the tables are,
// not an outbox's routes: for a [relayer.Outbox], pass
// store.TablesOf(outbox).
func New(db *sql.DB, tables store.Tables, opts Options) (*Console, error) {
	if db == nil {
		return nil, fmt.Errorf("console: New: %w", store.ErrNilDB)
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Refresh == 0 {
		opts.Refresh = RefreshDefault
	}
	if opts.ListLimit == 0 {
		opts.ListLimit = ListLimitDefault
	}
	if opts.SampleEvery == 0 {
		opts.SampleEvery = SampleEveryDefault
	}
	if opts.QueryTimeout == 0 {
		opts.QueryTimeout = QueryTimeoutDefault
	}
	if opts.MaxConcurrent == 0 {
		opts.MaxConcurrent = MaxConcurrentDefault
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	hosts, err := parseAllowedHosts(opts.AllowedHosts)
	if err != nil {
		return nil, err
	}
	st, err := store.New(db, tables)
	if err != nil {
		return nil, err
	}
	pages, err := template.New("").Funcs(funcs).ParseFS(assets, "assets/*.html")
	if err != nil {
		return nil, fmt.Errorf("console: templates: %w", err)
	}
	static, err := staticFiles()
	if err != nil {
		return nil, err
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("console: CSRF key: %w", err)
	}
	c := &Console{db: db, store: st, slots: make(chan struct{}, opts.MaxConcurrent), opts: opts, pages: pages,
		csrfKey: key, samples: newSamples(samplesKept, opts.SampleEvery), hosts: hosts}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", c.overview)
	mux.HandleFunc("GET /lanes", c.lanes)
	mux.HandleFunc("GET /parked", c.parked)
	mux.HandleFunc("POST /parked", c.parkedAction)
	mux.HandleFunc("GET /held", c.held)
	mux.HandleFunc("POST /held", c.heldAction)
	mux.HandleFunc("GET /dead", c.dead)
	mux.HandleFunc("POST /dead", c.deadAction)
	mux.HandleFunc("GET /message", c.message)
	mux.Handle("GET /assets/", static)
	c.handler = c.authenticate(http.NewCrossOriginProtection().Handler(mux))
	return c, nil
}

// ServeHTTP serves the console to requests for its host names (see
// [Options.AllowedHosts]); others get 421 Misdirected Request.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; form-action 'self'; frame-ancestors 'none'")
	if !c.checkHost(w, r) {
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, BodyMaxBytes)
	c.handler.ServeHTTP(w, r)
}

// authenticate refuses requests without the token, when one is set. A GET
// with ?token= sets the cookie and redirects to the same page without it,
// so that the token does not stay in the address bar or the history.
func (c *Console) authenticate(next http.Handler) http.Handler {
	if c.opts.Token == "" {
		return next
	}
	want := []byte(c.opts.Token)
	equal := func(got string) bool { return subtle.ConstantTimeCompare([]byte(got), want) == 1 }
	session := []byte(sessionValue(c.opts.Token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if t := r.URL.Query().Get("token"); t != "" && r.Method == http.MethodGet && equal(t) {
			http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: string(session), Path: mountPath(r), HttpOnly: true,
				SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
			q := r.URL.Query()
			q.Del("token")
			u := *r.URL
			u.RawQuery = q.Encode()
			seeOther(w, relative(&u))
			return
		}
		if auth := r.Header.Get("Authorization"); len(auth) > 7 && auth[:7] == "Bearer " && equal(auth[7:]) {
			next.ServeHTTP(w, r)
			return
		}
		if ck, err := r.Cookie(tokenCookie); err == nil && subtle.ConstantTimeCompare([]byte(ck.Value), session) == 1 {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="relayer console"`)
		http.Error(w, "401 unauthorized: this console needs its access token (open it with ?token=…, or send Authorization: Bearer …)", http.StatusUnauthorized)
	})
}

// mountPath is the path the console is served under, ending in '/': the
// prefix that http.StripPrefix took off r's path (the request line keeps
// it), or "/" for a console served at the root. The session cookie is
// scoped to it, so that a server's other handlers (a relay's /metrics and
// /readyz) never receive it.
func mountPath(r *http.Request) string {
	u, err := url.ParseRequestURI(r.RequestURI)
	if err != nil {
		return "/"
	}
	full, rest := u.EscapedPath(), r.URL.EscapedPath()
	if !strings.HasSuffix(full, rest) {
		return "/"
	}
	prefix := strings.TrimSuffix(full[:len(full)-len(rest)], "/")
	return prefix + "/"
}

// sessionValue is what the session cookie holds for token: an HMAC-SHA256
// keyed by the token, so that the cookie (in the browser's store, in a
// proxy's log) does not give the token away, while any replica of the
// console, before or after a restart, recognizes it.
func sessionValue(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("relayer console session"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// relative returns u's path's last element and query, for a redirect that
// stays under whatever prefix the console is mounted at. An element a
// browser could read as another site or scheme ("\\evil.com", "A:") or
// as another directory is replaced by "./": the redirect never leaves the
// console.
func relative(u *url.URL) string {
	p := u.Path
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			p = p[i+1:]
			break
		}
	}
	if !pageName(p) {
		p = "./"
	}
	if u.RawQuery != "" {
		p += "?" + u.RawQuery
	}
	return p
}

// pageName reports whether s is a plain file name: letters, digits, '-',
// '_' and '.', and neither "." nor "..".
func pageName(s string) bool {
	if s == "" || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// staticFiles serves the stylesheet and the script, and answers 404 to
// anything else under assets/: a directory, whose listing would name every
// embedded file, or a template.
func staticFiles() (http.Handler, error) {
	names := map[string]bool{}
	for _, pattern := range []string{"assets/*.css", "assets/*.js"} {
		matches, err := fs.Glob(assets, pattern)
		if err != nil {
			return nil, fmt.Errorf("console: assets: %w", err)
		}
		for _, m := range matches {
			names["/"+m] = true
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !names[r.URL.Path] {
			http.NotFound(w, r)
			return
		}
		http.ServeFileFS(w, r, assets, r.URL.Path[1:])
	}), nil
}

// csrfToken returns the token forms carry: an HMAC of the console's random
// key, which a page of another origin cannot read.
func (c *Console) csrfToken() string {
	m := hmac.New(sha256.New, c.csrfKey)
	m.Write([]byte("relayer console actions"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkAction refuses an action when the console is read-only or the form
// lacks the CSRF token, writing the response; it reports whether to go on.
func (c *Console) checkAction(w http.ResponseWriter, r *http.Request) bool {
	if c.opts.ReadOnly {
		http.Error(w, "403 forbidden: this console is read-only", http.StatusForbidden)
		return false
	}
	if err := r.ParseForm(); err != nil {
		if errors.As(err, new(*http.MaxBytesError)) {
			http.Error(w, fmt.Sprintf("400 bad request: the request body is over %d KiB (BodyMaxBytes)", BodyMaxBytes>>10), http.StatusBadRequest)
			return false
		}
		http.Error(w, "400 bad request: "+err.Error(), http.StatusBadRequest)
		return false
	}
	if got := r.PostForm.Get("csrf"); subtle.ConstantTimeCompare([]byte(got), []byte(c.csrfToken())) != 1 {
		http.Error(w, "403 forbidden: missing or wrong CSRF token; reload the page and try again", http.StatusForbidden)
		return false
	}
	return true
}
