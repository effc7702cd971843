package console

import (
	"cmp"
	"context"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/store"
)

// listFilter is the filter form of the parked and dead pages.
type listFilter struct {
	Type, Destination, Key, Older string
	older                         time.Duration
	// Reason matches the dead letters' reason (the dead page only).
	Reason string
	// After is the page's cursor as the URL carries it, empty for the
	// first page; after is what it reads as.
	After string
	after store.Cursor
}

// formatCursor writes c as a URL carries it: the instant in Unix
// microseconds, a colon, the id.
func formatCursor(c store.Cursor) string {
	return strconv.FormatInt(c.At.UnixMicro(), 10) + ":" + c.ID.String()
}

// parseCursor reads what formatCursor writes.
func parseCursor(s string) (store.Cursor, error) {
	at, id, ok := strings.Cut(s, ":")
	micros, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil {
		return store.Cursor{}, fmt.Errorf("page cursor %q: want <unix microseconds>:<uuid>", s)
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return store.Cursor{}, fmt.Errorf("page cursor %q: %q is not a UUID", s, id)
	}
	return store.Cursor{At: time.UnixMicro(micros).UTC(), ID: u}, nil
}

// parseFilter reads the filter form. A field that fails checkField is
// left empty in the filter returned with the error, so that the form does
// not show it again.
func parseFilter(q url.Values) (listFilter, error) {
	var f listFilter
	var bad error
	for _, field := range []struct {
		name string
		dst  *string
	}{{"type", &f.Type}, {"destination", &f.Destination}, {"key", &f.Key}, {"older", &f.Older}, {"reason", &f.Reason}, {"after", &f.After}} {
		v := q.Get(field.name)
		if err := checkField(field.name, v); err != nil {
			bad = cmp.Or(bad, err)
			continue
		}
		*field.dst = v
	}
	if bad != nil {
		return f, bad
	}
	if f.Older != "" {
		d, err := parseAge(f.Older)
		if err != nil {
			return f, err
		}
		f.older = d
	}
	if f.After != "" {
		c, err := parseCursor(f.After)
		if err != nil {
			f.After = ""
			return f, err
		}
		f.after = c
	}
	return f, nil
}

// checkField refuses a filter field or an action's key that the store
// could not match, or should not be asked to: over FilterMaxBytes, not
// UTF-8, or holding a NUL byte (which PostgreSQL's text refuses; no stored
// value has one).
func checkField(name, v string) error {
	switch {
	case len(v) > FilterMaxBytes:
		return fmt.Errorf("%s is %d bytes, over the limit of %d (FilterMaxBytes)", name, len(v), FilterMaxBytes)
	case !utf8.ValidString(v):
		return fmt.Errorf("%s is not valid UTF-8", name)
	case strings.IndexByte(v, 0) >= 0:
		return fmt.Errorf("%s holds a NUL byte", name)
	}
	return nil
}

// parseAge reads a duration such as 90s, 15m, 2h or 30d.
func parseAge(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 100_000 {
			return 0, fmt.Errorf("older than %q: want a number of days such as 30d", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("older than %q: want a duration such as 90s, 15m, 2h or 30d", s)
	}
	return d, nil
}

// dead returns the store's filter of the dead letters the form selects.
func (f listFilter) dead() store.DeadFilter {
	return store.DeadFilter{Type: f.Type, Destination: f.Destination, Key: f.Key, Reason: f.Reason, OlderThan: f.older, After: f.after}
}

// parked returns the store's filter of the parked keys the form selects.
func (f listFilter) parked() store.ParkedFilter {
	return store.ParkedFilter{Type: f.Type, Destination: f.Destination, Key: f.Key, OlderThan: f.older, After: f.after}
}

// query returns the filter as URL parameters, without the page's cursor.
func (f listFilter) query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"type": f.Type, "destination": f.Destination, "key": f.Key, "older": f.Older, "reason": f.Reason} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// listData is a filtered list page: the parked keys or the dead letters.
type listData[T any] struct {
	Page   string // "parked" or "dead": the page and its filter's action
	Filter listFilter
	Items  []T
	Limit  int
	// Next is the address of the next page, empty on the last; First that
	// of the first page, empty on it. Both are built from encoded values.
	Next, First template.URL
}

// Reasons are the reasons a dead letter is filtered by.
func (listData[T]) Reasons() []string {
	return store.DeadReasons()
}

// listPage serves a list page: the filter from the query string, then the
// items list returns for it, at most ListLimit of them, from the page's
// cursor; cursor is an item's place, for the link to the next page.
func listPage[T any](c *Console, w http.ResponseWriter, r *http.Request, nav, title string,
	list func(ctx context.Context, b *budgetTx, f listFilter, limit int) ([]T, error), cursor func(T) store.Cursor) {
	p := c.newPage(r, nav, title)
	name := nav + ".html"
	f, err := parseFilter(r.URL.Query())
	if err != nil {
		p.Data = listData[T]{Page: nav, Filter: f}
		p.Error = err.Error()
		c.render(w, name, p, http.StatusBadRequest)
		return
	}
	var items []T
	err = c.withTx(r, true, func(ctx context.Context, b *budgetTx) error {
		var err error
		items, err = list(ctx, b, f, c.opts.ListLimit)
		return err
	})
	if err != nil {
		c.failed(w, r, p, name, err)
		return
	}
	d := listData[T]{Page: nav, Filter: f, Items: items, Limit: c.opts.ListLimit}
	if len(items) == c.opts.ListLimit {
		q := f.query()
		q.Set("after", formatCursor(cursor(items[len(items)-1])))
		d.Next = template.URL(nav + "?" + q.Encode())
	}
	if f.After != "" {
		d.First = template.URL(nav + "?" + f.query().Encode())
	}
	p.Data = d
	c.render(w, name, p, http.StatusOK)
}
