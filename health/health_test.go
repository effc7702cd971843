package health_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/health"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type outbox struct {
	db    *sql.DB
	store *store.Store
}

func setup(t *testing.T) *outbox {
	t.Helper()
	db := testdb.Open(t, "pgx")
	opts := store.Tables{Schema: testdb.NewSchema(t), TablePrefix: "hc_"}
	if _, err := store.Migrate(context.Background(), db, opts); err != nil {
		t.Fatal(err)
	}
	st, err := store.New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &outbox{db: db, store: st}
}

// add writes one unordered message per creation time.
func (o *outbox) add(t *testing.T, created ...time.Time) {
	t.Helper()
	msgs := make([]relayer.Message, len(created))
	for i, c := range created {
		id, err := relayer.NewID()
		if err != nil {
			t.Fatal(err)
		}
		msgs[i] = relayer.Message{ID: id, Type: "t", Body: []byte("{}"), Transport: "mem", Destination: "d", CreatedAt: c}
	}
	if err := o.store.Insert(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
}

// response is the JSON body, decoded loosely enough to see nulls.
type response struct {
	Status           string   `json:"status"`
	Backlog          *int64   `json:"backlog"`
	OldestAgeSeconds *float64 `json:"oldest_age_seconds"`
	Reasons          []string `json:"reasons"`
}

func serve(t *testing.T, h http.Handler, method string) (*httptest.ResponseRecorder, response) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, "/healthz", nil))
	var body response
	if method == http.MethodGet && rec.Code != http.StatusMethodNotAllowed {
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("Content-Type %q", ct)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("body %q: %v", rec.Body, err)
		}
	}
	return rec, body
}

func TestHandlerHealthy(t *testing.T) {
	t.Parallel()
	o := setup(t)
	o.add(t, time.Now().Add(-10*time.Second), time.Now())
	h := health.Handler(o.store, health.Options{MaxBacklog: 2, MaxOldestAge: time.Minute})
	rec, body := serve(t, h, http.MethodGet)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d, body %s", rec.Code, rec.Body)
	}
	if body.Status != "ok" || body.Backlog == nil || *body.Backlog != 2 || body.OldestAgeSeconds == nil ||
		*body.OldestAgeSeconds < 10 || *body.OldestAgeSeconds > 40 || body.Reasons == nil || len(body.Reasons) != 0 {
		t.Fatalf("body %s", rec.Body)
	}
	if rec.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control %q", rec.Header().Get("Cache-Control"))
	}

	rec, _ = serve(t, h, http.MethodHead)
	if rec.Code != http.StatusOK || rec.Body.Len() != 0 {
		t.Fatalf("HEAD: status %d, %d body bytes", rec.Code, rec.Body.Len())
	}
}

func TestHandlerThresholds(t *testing.T) {
	t.Parallel()
	o := setup(t)
	o.add(t, time.Now().Add(-2*time.Minute), time.Now(), time.Now())
	for _, c := range []struct {
		name   string
		opts   health.Options
		reason string
	}{
		{"backlog", health.Options{MaxBacklog: 2}, "backlog 3 is above MaxBacklog 2"},
		{"age", health.Options{MaxOldestAge: time.Minute}, "above MaxOldestAge 1m0s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec, body := serve(t, health.Handler(o.store, c.opts), http.MethodGet)
			if rec.Code != http.StatusServiceUnavailable {
				t.Fatalf("status %d, want 503; body %s", rec.Code, rec.Body)
			}
			if body.Status != "unhealthy" || body.Backlog == nil || *body.Backlog != 3 || len(body.Reasons) != 1 ||
				!strings.Contains(body.Reasons[0], c.reason) {
				t.Fatalf("body %s, want the reason %q", rec.Body, c.reason)
			}
			rec, _ = serve(t, health.Handler(o.store, c.opts), http.MethodHead)
			if rec.Code != http.StatusServiceUnavailable || rec.Body.Len() != 0 {
				t.Fatalf("HEAD: status %d, %d body bytes", rec.Code, rec.Body.Len())
			}
		})
	}
	// Both past their thresholds: both reasons.
	r := health.Check(context.Background(), o.store, health.Options{MaxBacklog: 1, MaxOldestAge: time.Second})
	if r.Healthy() || len(r.Reasons) != 2 {
		t.Fatalf("Check = %+v, want two reasons", r)
	}
	// At the threshold is still healthy.
	if r := health.Check(context.Background(), o.store, health.Options{MaxBacklog: 3}); !r.Healthy() {
		t.Fatalf("Check at the threshold = %+v, want ok", r)
	}
}

func TestHandlerDatabaseDown(t *testing.T) {
	t.Parallel()
	o := setup(t)
	h := health.Handler(o.store, health.Options{})
	o.db.Close()
	rec, body := serve(t, h, http.MethodGet)
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", rec.Code)
	}
	if body.Status != "unhealthy" || len(body.Reasons) != 1 || !strings.Contains(body.Reasons[0], "database is closed") {
		t.Fatalf("body %s, want the database error as the reason", rec.Body)
	}
	// Unknown, not zero.
	if body.Backlog != nil || body.OldestAgeSeconds != nil || !strings.Contains(rec.Body.String(), `"backlog":null`) {
		t.Fatalf("body %s, want null backlog and age", rec.Body)
	}
}

func TestHandlerTimeout(t *testing.T) {
	t.Parallel()
	o := setup(t)
	// The lock makes the count wait until the timeout ends it.
	tx, err := o.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	opts := o.store.Tables()
	if _, err := tx.Exec(`LOCK TABLE "` + opts.Schema + `"."hc_outbox" IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rec, body := serve(t, health.Handler(o.store, health.Options{Timeout: 200 * time.Millisecond}), http.MethodGet)
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("the check took %s despite a 200ms timeout", elapsed)
	}
	if rec.Code != http.StatusServiceUnavailable || len(body.Reasons) != 1 || !strings.Contains(body.Reasons[0], "deadline exceeded") {
		t.Fatalf("status %d, body %s; want 503 with the deadline as the reason", rec.Code, rec.Body)
	}
}

func TestHandlerMethods(t *testing.T) {
	t.Parallel()
	st, err := store.New(&sql.DB{}, store.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	h := health.Handler(st, health.Options{})
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodOptions} {
		rec, _ := serve(t, h, m)
		if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: status %d, Allow %q; want 405 and GET, HEAD", m, rec.Code, rec.Header().Get("Allow"))
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		opts  health.Options
		field string
	}{
		{health.Options{MaxBacklog: -1}, "MaxBacklog"},
		{health.Options{MaxOldestAge: -time.Second}, "MaxOldestAge"},
		{health.Options{Timeout: -time.Second}, "Timeout"},
	} {
		err := c.opts.Validate()
		if !errors.Is(err, health.ErrInvalidOptions) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalidOptions naming %s", c.opts, err, c.field)
		}
		if r := health.Check(context.Background(), nil, c.opts); r.Healthy() || !strings.Contains(r.Reasons[0], c.field) {
			t.Errorf("Check with %+v = %+v, want unhealthy naming %s", c.opts, r, c.field)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Handler accepted %+v", c.opts)
				}
			}()
			st, _ := store.New(&sql.DB{}, store.Tables{})
			health.Handler(st, c.opts)
		}()
	}
	if err := (health.Options{MaxBacklog: 5, MaxOldestAge: time.Minute, Timeout: time.Second}).Validate(); err != nil {
		t.Errorf("Validate of valid options: %v", err)
	}
	if r := health.Check(context.Background(), nil, health.Options{}); r.Healthy() {
		t.Error("Check without a store is healthy")
	}
}
