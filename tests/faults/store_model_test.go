package faults

import (
	"bytes"
	"context"
	"database/sql"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"pgregory.net/rapid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

// modelRow is the model's view of one unordered outbox row.
type modelRow struct {
	deliverAt time.Time // zero: at once
	retryAt   time.Time // zero: never failed
	token     uuid.UUID // the current claim's, or Nil
	until     time.Time // the current claim's expiry
	attempts  int
	tokens    []uuid.UUID // every token the row was ever claimed with
}

// eligible is the store's rule: due, past its retry time, and its claim
// (if any) expired; expiry is inclusive.
func (r *modelRow) eligible(now time.Time) bool {
	return !r.deliverAt.After(now) && !r.retryAt.After(now) && (r.token == uuid.Nil || !r.until.After(now))
}

func (r *modelRow) live(token uuid.UUID, now time.Time) bool {
	return r.token != uuid.Nil && r.token == token && r.until.After(now)
}

// storeModel drives the store and a model of it side by side.
type storeModel struct {
	ctx  context.Context
	db   *sql.DB
	st   *workerstore.Store
	now  time.Time
	rows map[uuid.UUID]*modelRow
	hdrs []headers.Header
}

// The store's contract for unordered rows, against a model: claims are
// fenced (renew, complete and fail need the current token and a live claim),
// eligibility at an instant follows delivery time, retry time and claim
// expiry, takes return the eligible rows in id order and remove them only
// when their transaction commits, and a restore puts them back as given.
// Instants step by whole milliseconds and claims last an odd number of half
// milliseconds, so no expiry ever equals the clock.
func TestStoreContractAgainstModel(t *testing.T) {
	db := testdb.Open(t, "pgx")
	schema := testdb.NewSchema(t)
	opts := store.Tables{Schema: schema}
	_, err := store.Migrate(context.Background(), db, opts)
	must(t, err)
	st, err := workerstore.New(db, opts)
	must(t, err)
	checks := 0
	rapid.Check(t, func(rt *rapid.T) {
		checks++
		_, err := db.Exec(`TRUNCATE ` + schema + `.outbox`)
		if err != nil {
			rt.Fatal(err)
		}
		m := &storeModel{ctx: context.Background(), db: db, st: st, rows: map[uuid.UUID]*modelRow{},
			now:  time.Now().UTC().Truncate(time.Millisecond).Add(time.Duration(checks) * time.Hour),
			hdrs: []headers.Header{{Name: relayer.HeaderContentType, Value: []byte("application/json")}}}
		rt.Repeat(map[string]func(*rapid.T){
			"insert":  m.insert,
			"advance": m.advance,
			"claim":   m.claim,
			"renew":   m.renew,
			"complete": func(rt *rapid.T) {
				id, r := m.pick(rt)
				if r == nil {
					return
				}
				token := m.token(rt, r)
				ok, err := m.st.Complete(m.ctx, id, token, m.now)
				m.agree(rt, "complete", ok, err, r.live(token, m.now))
				if ok {
					delete(m.rows, id)
				}
			},
			"fail": func(rt *rapid.T) {
				id, r := m.pick(rt)
				if r == nil {
					return
				}
				token := m.token(rt, r)
				ok, err := m.st.Fail(m.ctx, id, token, "refused", m.now)
				m.agree(rt, "fail", ok, err, r.live(token, m.now))
				if ok {
					r.attempts++
					r.token, r.until = uuid.Nil, time.Time{}
				}
			},
			"take": m.take,
			"": func(rt *rapid.T) { // after every step: counts agree
				n, err := m.st.CountEligible(m.ctx, m.now)
				if err != nil {
					rt.Fatal(err)
				}
				want := 0
				for _, r := range m.rows {
					if r.eligible(m.now) {
						want++
					}
				}
				if int(n) != want {
					rt.Fatalf("CountEligible at %s = %d, model says %d", m.now.Format(time.StampMilli), n, want)
				}
			},
		})
	})
}

func (m *storeModel) agree(rt *rapid.T, op string, ok bool, err error, want bool) {
	if err != nil {
		rt.Fatalf("%s: %v", op, err)
	}
	if ok != want {
		rt.Fatalf("%s reported %v, model says %v", op, ok, want)
	}
}

// pick returns a row of the model (or an id the store never had), nil when
// there is none to pick.
func (m *storeModel) pick(rt *rapid.T) (uuid.UUID, *modelRow) {
	ids := slices.SortedFunc(func(yield func(uuid.UUID) bool) {
		for id := range m.rows {
			if !yield(id) {
				return
			}
		}
	}, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	if len(ids) == 0 {
		return uuid.Nil, nil
	}
	id := rapid.SampledFrom(ids).Draw(rt, "id")
	return id, m.rows[id]
}

// token draws the row's current token, a stale one, or a stranger's.
func (m *storeModel) token(rt *rapid.T, r *modelRow) uuid.UUID {
	choices := append([]uuid.UUID{uuid.New()}, r.tokens...)
	if r.token != uuid.Nil {
		choices = append(choices, r.token, r.token)
	}
	return rapid.SampledFrom(choices).Draw(rt, "token")
}

func (m *storeModel) insert(rt *rapid.T) {
	n := rapid.IntRange(1, 3).Draw(rt, "n")
	later := rapid.IntRange(0, 3).Draw(rt, "deliver in (s)")
	msgs := make([]relayer.Message, n)
	for i := range msgs {
		msgs[i] = relayer.Message{ID: uuid.Must(relayer.NewID()), Type: "model.event", Transport: "t", Destination: "d",
			Body: []byte(`{}`), Headers: m.hdrs, CreatedAt: m.now}
		if later > 0 {
			msgs[i].DeliverAt = m.now.Add(time.Duration(later) * time.Second)
		}
	}
	if err := m.st.Insert(m.ctx, msgs); err != nil {
		rt.Fatal(err)
	}
	for _, msg := range msgs {
		m.rows[msg.ID] = &modelRow{deliverAt: msg.DeliverAt}
	}
}

func (m *storeModel) advance(rt *rapid.T) {
	m.now = m.now.Add(time.Duration(rapid.IntRange(1, 4000).Draw(rt, "ms")) * time.Millisecond)
}

// claimFor draws a claim duration: an odd number of half milliseconds.
func claimFor(rt *rapid.T) time.Duration {
	return time.Duration(2*rapid.IntRange(1, 3000).Draw(rt, "claim (ms)")+1) * time.Millisecond / 2
}

func (m *storeModel) claim(rt *rapid.T) {
	id, r := m.pick(rt)
	if r == nil {
		return
	}
	c := store.Claim{Token: uuid.New(), Until: m.now.Add(claimFor(rt))}
	ok, err := m.st.Claim(m.ctx, id, c, m.now)
	m.agree(rt, "claim", ok, err, r.eligible(m.now))
	if ok {
		r.token, r.until = c.Token, c.Until
		r.tokens = append(r.tokens, c.Token)
	}
}

func (m *storeModel) renew(rt *rapid.T) {
	id, r := m.pick(rt)
	if r == nil {
		return
	}
	token := m.token(rt, r)
	until := m.now.Add(claimFor(rt))
	ok, err := m.st.Renew(m.ctx, id, token, until, m.now)
	m.agree(rt, "renew", ok, err, r.live(token, m.now))
	if ok && until.After(r.until) {
		r.until = until
	}
}

// take takes up to limit eligible rows in a transaction, and then commits
// (the rows are gone), rolls back (nothing changed) or writes them back
// failed before committing.
func (m *storeModel) take(rt *rapid.T) {
	limit := rapid.IntRange(1, 4).Draw(rt, "limit")
	end := rapid.SampledFrom([]string{"commit", "rollback", "restore"}).Draw(rt, "end")
	tx, err := m.db.BeginTx(m.ctx, nil)
	if err != nil {
		rt.Fatal(err)
	}
	defer tx.Rollback()
	bound, err := m.st.With(tx)
	if err != nil {
		rt.Fatal(err)
	}
	rows, err := bound.TakeNextUnordered(m.ctx, nil, uuid.Nil, limit, m.now, m.now.Add(time.Millisecond), nil)
	if err != nil {
		rt.Fatal(err)
	}
	var want []uuid.UUID
	for id, r := range m.rows {
		if r.eligible(m.now) {
			want = append(want, id)
		}
	}
	slices.SortFunc(want, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	want = want[:min(limit, len(want))]
	var got []uuid.UUID
	for _, r := range rows {
		got = append(got, r.ID)
	}
	if !slices.Equal(got, want) {
		rt.Fatalf("take of %d returned %v, model says %v", limit, got, want)
	}
	retryAt := m.now.Add(time.Duration(rapid.IntRange(0, 3).Draw(rt, "retry in (s)")) * time.Second)
	switch end {
	case "rollback":
		return
	case "restore":
		for i := range rows {
			rows[i].Attempts++
			rows[i].LastError = "refused"
			rows[i].RetryAt = retryAt
		}
		if err := bound.Restore(m.ctx, rows); err != nil {
			rt.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		rt.Fatal(err)
	}
	for _, id := range got {
		if end == "restore" {
			r := m.rows[id]
			r.attempts++
			r.retryAt = retryAt
			r.token, r.until = uuid.Nil, time.Time{}
			continue
		}
		delete(m.rows, id)
	}
}
