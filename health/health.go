package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/relayer-go/relayer/store"
)

// Defaults and limits of [Options].
const (
	// TimeoutDefault bounds a request to [Handler] when Options.Timeout is zero.
	TimeoutDefault = 5 * time.Second
)

// ErrInvalidOptions is returned by [Options.Validate]; the message names the
// field.
var ErrInvalidOptions = errors.New("health: invalid options")

// Options set the thresholds past which an outbox is unhealthy. The zero value
// checks only that the outbox can be queried.
type Options struct {
	// MaxBacklog is the largest number of deliverable rows that is still
	// healthy; the outbox is unhealthy above it. It must not be negative.
	// Default: 0, no threshold.
	MaxBacklog int64
	// MaxOldestAge is the longest a deliverable row may have been due and
	// still be healthy; the outbox is unhealthy when its longest-waiting row
	// has waited longer. It must not be negative. Default: 0, no threshold.
	MaxOldestAge time.Duration
	// Timeout bounds each request to [Handler], database query included, in
	// addition to the request's own context. It must not be negative.
	// Default: [TimeoutDefault].
	Timeout time.Duration
}

// Validate reports the first field out of range.
func (o Options) Validate() error {
	switch {
	case o.MaxBacklog < 0:
		return fmt.Errorf("%w: MaxBacklog must be 0 (no threshold) or positive, got %d", ErrInvalidOptions, o.MaxBacklog)
	case o.MaxOldestAge < 0:
		return fmt.Errorf("%w: MaxOldestAge must be 0 (no threshold) or positive, got %s", ErrInvalidOptions, o.MaxOldestAge)
	case o.Timeout < 0:
		return fmt.Errorf("%w: Timeout must be 0 (default %s) or positive, got %s", ErrInvalidOptions, TimeoutDefault, o.Timeout)
	}
	return nil
}

// Status is the verdict of a [Report].
type Status string

// The two verdicts.
const (
	StatusOK        Status = "ok"
	StatusUnhealthy Status = "unhealthy"
)

// Report is the outcome of a [Check], shaped for JSON:
//
//	{"status":"unhealthy","backlog":1204,"oldest_age_seconds":95.2,
//	 "reasons":["backlog 1204 is above MaxBacklog 1000"]}
//
// Backlog and OldestAgeSeconds are nil (JSON null) when the outbox could not
// be queried, so that a failure never reads as an empty backlog.
type Report struct {
	Status Status `json:"status"`
	// Backlog counts the rows deliverable at the check (store.Stats.Eligible).
	Backlog *int64 `json:"backlog"`
	// OldestAgeSeconds is how long the longest-waiting deliverable row has been
	// due, in seconds, 0 when no row is deliverable. A scheduled row counts
	// from its delivery time, not its creation.
	OldestAgeSeconds *float64 `json:"oldest_age_seconds"`
	// Reasons says why the outbox is unhealthy; empty when it is not.
	Reasons []string `json:"reasons"`
}

// Healthy reports whether the status is [StatusOK].
func (r Report) Healthy() bool { return r.Status == StatusOK }

// Check queries the outbox st reads, with one [store.Store.Stats] statement,
// and judges it against opts. It is unhealthy when the backlog or the age of
// its oldest row is past a threshold, when the query fails (the reason holds
// the error text), and when opts are invalid (nothing is queried). ctx bounds
// the query; a deadline that ends it makes the report unhealthy. For a
// relayer.Outbox, st is store.New(db, store.TablesOf(outbox)).
func Check(ctx context.Context, st *store.Store, opts Options) Report {
	if err := opts.Validate(); err != nil {
		return unhealthy(err.Error())
	}
	if st == nil {
		return unhealthy("health: no store to check")
	}
	now := time.Now()
	s, err := st.Stats(ctx, now)
	if err != nil {
		return unhealthy("database: " + err.Error())
	}
	age := waited(now, s.OldestDueAt)
	ageSeconds := age.Seconds()
	r := Report{Status: StatusOK, Backlog: &s.Eligible, OldestAgeSeconds: &ageSeconds, Reasons: []string{}}
	if opts.MaxBacklog > 0 && s.Eligible > opts.MaxBacklog {
		r.Reasons = append(r.Reasons, fmt.Sprintf("backlog %d is above MaxBacklog %d", s.Eligible, opts.MaxBacklog))
	}
	if opts.MaxOldestAge > 0 && age > opts.MaxOldestAge {
		r.Reasons = append(r.Reasons, fmt.Sprintf("oldest deliverable row has waited %s, above MaxOldestAge %s",
			age.Round(time.Millisecond), opts.MaxOldestAge))
	}
	if len(r.Reasons) > 0 {
		r.Status = StatusUnhealthy
	}
	return r
}

func unhealthy(reason string) Report {
	return Report{Status: StatusUnhealthy, Reasons: []string{reason}}
}

// waited is how long ago since was; zero for the zero time and for instants a
// writer whose clock runs ahead put in the future.
func waited(now, since time.Time) time.Duration {
	if since.IsZero() || since.After(now) {
		return 0
	}
	return now.Sub(since)
}

// Handler returns an HTTP handler that runs [Check] for each GET or HEAD
// request and answers with the [Report] as JSON: status 200 when healthy, 503
// when not. Other methods get 405 with an Allow header. Each check is bounded
// by opts.Timeout as well as by the request's context. Responses are marked
// not cacheable.
//
// Handler panics if st is nil or opts are invalid: it is meant to be built once
// at startup from fixed settings. Call [Options.Validate] first to handle
// settings read at run time.
func Handler(st *store.Store, opts Options) http.Handler {
	if st == nil {
		panic("health: Handler needs a store")
	}
	if err := opts.Validate(); err != nil {
		panic(err)
	}
	if opts.Timeout == 0 {
		opts.Timeout = TimeoutDefault
	}
	return &handler{st: st, opts: opts}
}

type handler struct {
	st   *store.Store
	opts Options
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.Timeout)
	defer cancel()
	report := Check(ctx, h.st, h.opts)
	body, err := json.Marshal(report)
	if err != nil {
		// A Report holds only strings and numbers; this cannot happen.
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	body = append(body, '\n')
	code := http.StatusOK
	if !report.Healthy() {
		code = http.StatusServiceUnavailable
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}
