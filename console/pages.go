package console

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/consume/heldkeys"
	"github.com/relayer-go/relayer/headers"
	"github.com/relayer-go/relayer/store"
)

// page is what every template receives.
type page struct {
	Title      string
	Nav        string
	Refresh    int // seconds; 0: no refresh
	ReadOnly   bool
	ShowBodies bool
	CSRF       string
	Flash      string
	Error      string
	Now        time.Time
	Outbox     string
	Data       any
}

func (c *Console) newPage(r *http.Request, nav, title string) *page {
	o := c.store.Tables()
	return &page{
		Title: title, Nav: nav, Refresh: int(c.opts.Refresh / time.Second),
		ReadOnly: c.opts.ReadOnly, ShowBodies: c.opts.ShowBodies, CSRF: c.csrfToken(),
		Flash: flash(r.URL.Query()), Now: time.Now().UTC(),
		Outbox: o.Label(),
	}
}

// flash renders the outcome of the action that redirected here, from fixed
// phrases: nothing a link could inject.
func flash(q url.Values) string {
	n, err := strconv.ParseInt(q.Get("n"), 10, 64)
	if err != nil || n < 0 {
		return ""
	}
	what := map[string]string{
		"retry":      "released %d parked key(s): each resumes at its head, in order",
		"skip":       "moved %d parked head(s) to the dead letters",
		"requeue":    "requeued %d dead letter(s) into the outbox",
		"purge":      "purged %d dead letter(s)",
		"retry-held": "retried %d held key(s): their consumers try each first message again within their poll",
		"skip-held":  "skipping the first message of %d held key(s): its consumer sends it to its dead letters, and the key goes on",
	}[q.Get("did")]
	if what == "" {
		return ""
	}
	return fmt.Sprintf(what, n)
}

func (c *Console) render(w http.ResponseWriter, name string, p *page, status int) {
	var buf bytes.Buffer
	if err := c.pages.ExecuteTemplate(&buf, name, p); err != nil {
		c.opts.Logger.Error("console: render", slog.String("page", name), slog.String("error", err.Error()))
		http.Error(w, "500 internal error: rendering the page failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	buf.WriteTo(w)
}

// failed renders a page whose reads failed, saying why.
func (c *Console) failed(w http.ResponseWriter, r *http.Request, p *page, name string, err error) {
	msg, status := c.dbFailure(r, "reading the "+p.Nav+" page", err, slog.String("page", p.Nav))
	p.Error = msg
	p.Data = nil
	c.render(w, name, p, status)
}

// exactRows is the largest outbox (by the planner's estimate) whose pages
// count exactly; larger ones are estimated from a sample of about as many
// rows, so that a page costs about the same whatever the backlog.
const exactRows = 100_000

// overviewData is the overview page.
type overviewData struct {
	store.Backlog
	DeadReason []reasonCount
	Pauses     []store.Pause
	Chart      chart
}

// Estimated reports whether the outbox's counts are estimates.
func (d overviewData) Estimated() bool { return d.Sample < 1 }

// DeadEstimated reports whether the dead letters' counts are estimates.
func (d overviewData) DeadEstimated() bool { return d.DeadSample < 1 }

type reasonCount struct {
	Reason string
	Count  int64
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	p := c.newPage(r, "overview", "Overview")
	var d overviewData
	err := c.withStore(r, true, func(ctx context.Context, st *store.Store) error {
		var err error
		if d.Backlog, err = st.Backlog(ctx, time.Time{}, exactRows); err != nil {
			return err
		}
		if !d.DeadEstimated() { // by reason needs every row: skipped on a large table
			reasons, err := st.DeadByReason(ctx)
			if err != nil {
				return err
			}
			for reason, n := range reasons {
				d.DeadReason = append(d.DeadReason, reasonCount{reason, n})
			}
			slices.SortFunc(d.DeadReason, func(a, b reasonCount) int { return strings.Compare(a.Reason, b.Reason) })
		}
		if d.Pauses, err = st.Pauses(ctx); err != nil {
			return err
		}
		c.sample(ctx, st) // last: a failure aborts the transaction
		return nil
	})
	if err != nil {
		c.failed(w, r, p, "overview.html", err)
		return
	}
	d.Chart = newChart(c.samples.rates())
	p.Data = d
	c.render(w, "overview.html", p, http.StatusOK)
}

// Run samples the outbox table's activity every [Options.SampleEvery] until
// ctx ends, so that the overview's chart shows the time the console has run,
// not only the time its overview was open; it returns ctx's error. Each
// sample is one statement within the console's database budget. Without
// Run, the overview samples as it is served.
func (c *Console) Run(ctx context.Context) error {
	t := time.NewTicker(c.opts.SampleEvery)
	defer t.Stop()
	for {
		err := c.withBudget(ctx, true, func(ctx context.Context, b *budgetTx) error {
			c.sample(ctx, b.st)
			return nil
		})
		if err != nil && ctx.Err() == nil {
			c.opts.Logger.Warn("console: activity sample", slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// sample records the table's activity counters when the last sample is old
// enough; a failure only leaves a gap in the chart.
func (c *Console) sample(ctx context.Context, st *store.Store) {
	now := time.Now()
	if !c.samples.due(now) {
		return
	}
	ins, del, err := st.Activity(ctx)
	if err != nil {
		c.opts.Logger.Warn("console: activity sample", slog.String("error", err.Error()))
		return
	}
	x := sample{at: now, inserted: ins, deleted: del}
	counts, recorded, err := st.DeliveredCounts(ctx)
	if err != nil {
		c.opts.Logger.Warn("console: activity sample", slog.String("error", err.Error()))
		return
	}
	if recorded {
		x.delivered = make(map[uuid.UUID]int64, len(counts))
		for _, d := range counts {
			x.delivered[d.Token] = d.Delivered
		}
	}
	c.samples.add(x)
}

// laneRow is one lane on the lanes page.
type laneRow struct {
	store.LaneSummary
	Owner      string
	LeaseUntil time.Time
}

type lanesData struct {
	Lanes   []laneRow
	Members []store.LeaseRow
	Others  []store.LeaseRow // recovery, cleanup
	// Sample is the share of the outbox read to count pending rows (1:
	// exact).
	Sample float64
}

// Estimated reports whether the pending counts are estimates.
func (d lanesData) Estimated() bool { return d.Sample < 1 }

func (c *Console) lanes(w http.ResponseWriter, r *http.Request) {
	p := c.newPage(r, "lanes", "Lanes")
	var leases []store.LeaseRow
	var summaries []store.LaneSummary
	var sample float64
	err := c.withStore(r, true, func(ctx context.Context, st *store.Store) error {
		var err error
		if leases, err = st.LiveLeases(ctx); err != nil {
			return err
		}
		summaries, sample, err = st.Lanes(ctx, exactRows)
		return err
	})
	if err != nil {
		c.failed(w, r, p, "lanes.html", err)
		return
	}
	d := lanesData{Sample: sample}
	byLane := map[int]*laneRow{}
	for _, s := range summaries {
		d.Lanes = append(d.Lanes, laneRow{LaneSummary: s})
	}
	for i := range d.Lanes {
		byLane[d.Lanes[i].Lane] = &d.Lanes[i]
	}
	for _, l := range leases {
		_, isMember := l.Member()
		n, isLane := l.Lane()
		switch {
		case isMember:
			d.Members = append(d.Members, l)
		case isLane:
			row := byLane[n]
			if row == nil {
				d.Lanes = append(d.Lanes, laneRow{LaneSummary: store.LaneSummary{Lane: n}})
				row = &d.Lanes[len(d.Lanes)-1]
				for i := range d.Lanes { // the append may have moved them
					byLane[d.Lanes[i].Lane] = &d.Lanes[i]
				}
			}
			row.Owner, row.LeaseUntil = l.Owner, l.ExpiresAt
		default:
			d.Others = append(d.Others, l)
		}
	}
	slices.SortFunc(d.Lanes, func(a, b laneRow) int { return a.Lane - b.Lane })
	p.Data = d
	c.render(w, "lanes.html", p, http.StatusOK)
}

func (c *Console) parked(w http.ResponseWriter, r *http.Request) {
	listPage(c, w, r, "parked", "Parked keys", func(ctx context.Context, b *budgetTx, f listFilter, limit int) ([]store.ParkedKey, error) {
		// Counting the rows that wait behind each key reads the pending rows
		// of its lane: the count has half the budget, and past it the keys
		// are listed without it (Waiting -1).
		var keys []store.ParkedKey
		counted, err := b.optional(ctx, 0.5, func() (err error) {
			keys, err = b.st.ParkedKeys(ctx, f.parked(), limit)
			return err
		})
		if err != nil || counted {
			return keys, err
		}
		return b.st.ParkedHeads(ctx, f.parked(), limit)
	}, store.ParkedKey.Cursor)
}

func (c *Console) parkedAction(w http.ResponseWriter, r *http.Request) {
	if !c.checkAction(w, r) {
		return
	}
	op, key := r.PostForm.Get("op"), r.PostForm.Get("key")
	var act func(ctx context.Context, st *store.Store) (int64, error)
	switch {
	case op == "retry" && (key != "" || r.PostForm.Get("all") == "1"):
		act = func(ctx context.Context, st *store.Store) (int64, error) {
			return st.RetryParked(ctx, store.ParkedFilter{Key: key})
		}
	case op == "skip" && key != "":
		act = func(ctx context.Context, st *store.Store) (int64, error) { return st.SkipParkedHead(ctx, key) }
	default:
		http.Error(w, "400 bad request: want op=retry with a key (or all=1), or op=skip with a key", http.StatusBadRequest)
		return
	}
	if err := checkField("key", key); err != nil {
		http.Error(w, "400 bad request: "+err.Error(), http.StatusBadRequest)
		return
	}
	c.act(w, r, "parked", op, act, slog.String("key", key))
}

// heldData is the held keys page: the keys consumers hold in the
// console's tables, the first ListLimit of them.
type heldData struct {
	Consumer, Key string
	Items         []heldkeys.Key
	Limit         int
}

// held lists the keys consumers hold (see consume.Consumer.StartHeldKeys),
// longest held first, filtered by consumer and key.
func (c *Console) held(w http.ResponseWriter, r *http.Request) {
	p := c.newPage(r, "held", "Held keys")
	q := r.URL.Query()
	d := heldData{Consumer: q.Get("consumer"), Key: q.Get("key"), Limit: c.opts.ListLimit}
	for _, field := range []struct{ name, value string }{{"consumer", d.Consumer}, {"key", d.Key}} {
		if err := checkField(field.name, field.value); err != nil {
			p.Data, p.Error = d, err.Error()
			c.render(w, "held.html", p, http.StatusBadRequest)
			return
		}
	}
	err := c.withTx(r, true, func(ctx context.Context, b *budgetTx) error {
		var err error
		d.Items, err = heldkeys.List(ctx, b.tx, c.store.Tables(), heldkeys.Filter{Consumer: d.Consumer, Key: d.Key}, d.Limit)
		return err
	})
	if err != nil {
		p.Data = d
		c.failed(w, r, p, "held.html", err)
		return
	}
	p.Data = d
	c.render(w, "held.html", p, http.StatusOK)
}

// heldAction retries a consumer's held key, or skips its first message.
func (c *Console) heldAction(w http.ResponseWriter, r *http.Request) {
	if !c.checkAction(w, r) {
		return
	}
	op, consumer, key, message := r.PostForm.Get("op"), r.PostForm.Get("consumer"), r.PostForm.Get("key"), r.PostForm.Get("message")
	for _, field := range []struct{ name, value string }{{"consumer", consumer}, {"key", key}} {
		if err := checkField(field.name, field.value); err != nil {
			http.Error(w, "400 bad request: "+err.Error(), http.StatusBadRequest)
			return
		}
	}
	if consumer == "" || key == "" || (op != "retry" && op != "skip") {
		http.Error(w, "400 bad request: want op=retry or op=skip, with a consumer and a key", http.StatusBadRequest)
		return
	}
	var first uuid.UUID
	if op == "skip" {
		var err error
		if first, err = uuid.Parse(message); err != nil {
			http.Error(w, "400 bad request: op=skip needs message, the id of the key's first waiting message", http.StatusBadRequest)
			return
		}
	}
	opts := c.store.Tables()
	c.actTx(w, r, "held", op+"-held", func(ctx context.Context, b *budgetTx) (int64, error) {
		if op == "retry" {
			return heldkeys.Retry(ctx, b.tx, opts, heldkeys.Filter{Consumer: consumer, Key: key})
		}
		ok, err := heldkeys.Skip(ctx, b.tx, opts, consumer, key, first)
		if ok {
			return 1, err
		}
		return 0, err
	}, slog.String("consumer", consumer), slog.String("key", key))
}

func (c *Console) dead(w http.ResponseWriter, r *http.Request) {
	listPage(c, w, r, "dead", "Dead letters", func(ctx context.Context, b *budgetTx, f listFilter, limit int) ([]store.DeadLetter, error) {
		return b.st.DeadLetters(ctx, f.dead(), limit)
	}, store.DeadLetter.Cursor)
}

// deadAction requeues or purges dead letters: those whose ids the form
// names, or, with all=1, every one the form's filter matches.
func (c *Console) deadAction(w http.ResponseWriter, r *http.Request) {
	if !c.checkAction(w, r) {
		return
	}
	f, err := parseFilter(r.PostForm)
	if err != nil {
		http.Error(w, "400 bad request: "+err.Error(), http.StatusBadRequest)
		return
	}
	filter := f.dead()
	filter.After = store.Cursor{} // the filter's matches, whatever page the form was on
	for _, s := range r.PostForm["id"] {
		id, err := uuid.Parse(s)
		if err != nil {
			http.Error(w, fmt.Sprintf("400 bad request: id %q is not a UUID", s), http.StatusBadRequest)
			return
		}
		filter.IDs = append(filter.IDs, id)
	}
	all := r.PostForm.Get("all") == "1"
	if all {
		filter.IDs = nil // every one the filter matches, selected or not
	}
	if len(filter.IDs) == 0 && !all {
		http.Error(w, "400 bad request: select dead letters (id=…), or send all=1 to act on every one the filter matches", http.StatusBadRequest)
		return
	}
	op := r.PostForm.Get("op")
	var act func(ctx context.Context, st *store.Store) (int64, error)
	switch op {
	case "requeue":
		act = func(ctx context.Context, st *store.Store) (int64, error) { return st.RequeueDead(ctx, filter) }
	case "purge":
		act = func(ctx context.Context, st *store.Store) (int64, error) { return st.PurgeDead(ctx, filter) }
	default:
		http.Error(w, "400 bad request: want op=requeue or op=purge", http.StatusBadRequest)
		return
	}
	c.act(w, r, "dead", op, act, slog.Int("ids", len(filter.IDs)), slog.String("type", f.Type),
		slog.String("destination", f.Destination), slog.String("key", f.Key), slog.String("reason", f.Reason), slog.String("older_than", f.Older))
}

// act runs an action within the request's database budget, logs it, and
// redirects to its page with its outcome.
func (c *Console) act(w http.ResponseWriter, r *http.Request, pageName, op string, run func(ctx context.Context, st *store.Store) (int64, error), attrs ...slog.Attr) {
	c.actTx(w, r, pageName, op, func(ctx context.Context, b *budgetTx) (int64, error) { return run(ctx, b.st) }, attrs...)
}

// actTx is act for an action that runs on the request's transaction.
func (c *Console) actTx(w http.ResponseWriter, r *http.Request, pageName, op string, run func(ctx context.Context, b *budgetTx) (int64, error), attrs ...slog.Attr) {
	var n int64
	err := c.withTx(r, false, func(ctx context.Context, b *budgetTx) error {
		var err error
		n, err = run(ctx, b)
		return err
	})
	base := []slog.Attr{slog.String("action", pageName+" "+op), slog.String("remote", r.RemoteAddr),
		slog.String("user_agent", r.UserAgent()), slog.Time("at", time.Now().UTC())}
	if err != nil {
		msg, status := c.dbFailure(r, "action", err, append(base, attrs...)...)
		http.Error(w, strconv.Itoa(status)+" "+strings.ToLower(http.StatusText(status))+": "+msg, status)
		return
	}
	c.opts.Logger.LogAttrs(r.Context(), slog.LevelInfo, "console: action", append(append(base, attrs...), slog.Int64("rows", n))...)
	q := url.Values{"did": {op}, "n": {strconv.FormatInt(n, 10)}}
	seeOther(w, pageName+"?"+q.Encode())
}

// messageData is one message, wherever it is.
type messageData struct {
	ID       string
	Found    bool
	Where    string // "outbox" or "dead letters"
	State    string
	Row      store.Row
	ParkedAt time.Time
	Reason   string
	DeadAt   time.Time
	Body     body
}

// body is a message body as the page shows it.
type body struct {
	Text   string
	IsText bool
	Size   int
}

func showBody(b []byte) body {
	if utf8.Valid(b) {
		return body{Text: string(b), IsText: true, Size: len(b)}
	}
	return body{Text: hexDump(b), Size: len(b)}
}

func (c *Console) message(w http.ResponseWriter, r *http.Request) {
	p := c.newPage(r, "message", "Message")
	p.Refresh = 0 // a reader looking at a body should not lose their place
	raw := strings.TrimSpace(r.URL.Query().Get("id"))
	d := messageData{ID: raw}
	if raw == "" {
		p.Data = d
		c.render(w, "message.html", p, http.StatusOK)
		return
	}
	id, err := uuid.Parse(raw)
	if err != nil {
		p.Data = d
		p.Error = fmt.Sprintf("%q is not a message id (a UUID)", raw)
		c.render(w, "message.html", p, http.StatusBadRequest)
		return
	}
	err = c.withStore(r, true, func(ctx context.Context, st *store.Store) error {
		row, parkedAt, found, err := st.Message(ctx, id)
		if err != nil {
			return err
		}
		if found {
			d.Found, d.Where, d.Row, d.ParkedAt = true, "outbox", row, parkedAt
			d.State = rowState(row, parkedAt, time.Now())
			return nil
		}
		letters, err := st.DeadLetters(ctx, store.DeadFilter{IDs: []uuid.UUID{id}}, 1)
		if err != nil {
			return err
		}
		if len(letters) == 1 {
			d.Found, d.Where, d.Row, d.Reason, d.DeadAt = true, "dead letters", letters[0].Row, letters[0].Reason, letters[0].DeadAt
			d.State = "dead (" + letters[0].Reason + ")"
		}
		return nil
	})
	if err != nil {
		c.failed(w, r, p, "message.html", err)
		return
	}
	if d.Found && c.opts.ShowBodies {
		d.Body = showBody(d.Row.Body)
	}
	status := http.StatusOK
	if !d.Found {
		status = http.StatusNotFound
	}
	p.Data = d
	c.render(w, "message.html", p, status)
}

// rowState names the class of an outbox row at now, as Stats counts them.
func rowState(r store.Row, parkedAt, now time.Time) string {
	switch {
	case !parkedAt.IsZero():
		return "parked"
	case r.DeliverAt.After(now):
		return "scheduled"
	case r.ClaimedUntil.After(now):
		return "being sent (claimed)"
	case r.RetryAt.After(now):
		return "waiting for its retry"
	}
	return "due"
}

// decodedHeaders returns a row's headers; a corrupt row has none (the page
// shows its Corrupt error).
func decodedHeaders(r store.Row) []headers.Header {
	if r.Corrupt != nil {
		return nil
	}
	return r.Headers
}

// seeOther redirects to location, a URL relative to the current page, as
// is: http.Redirect would make it absolute from the request's path, which
// lacks the prefix the console may be mounted under.
func seeOther(w http.ResponseWriter, location string) {
	w.Header().Set("Location", location)
	w.WriteHeader(http.StatusSeeOther)
}
