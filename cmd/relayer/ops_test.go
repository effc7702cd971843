package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/internal/testdb"
	"github.com/relayer-go/relayer/store"
)

type opsEvent struct {
	N int `json:"n"`
}

type opsOrderedEvent struct {
	N int `json:"n"`
}

// opsBundle is an outbox in a test schema with a few rows of each state.
type opsBundle struct {
	url, schema, prefix string
	db                  *sql.DB
	eligible, scheduled uuid.UUID
	parked, dead        uuid.UUID
}

// flags returns the connection flags of the bundle's outbox.
func (b *opsBundle) flags() []string {
	return []string{"--database-url", b.url, "--schema", b.schema, "--prefix", b.prefix}
}

func (b *opsBundle) run(t *testing.T, args ...string) result {
	t.Helper()
	return runCmd(t, append(args, b.flags()...)...)
}

// setupOps migrates an outbox with the migrate command and fills it: one
// eligible row, one scheduled an hour ahead, one parked ordered row, one dead
// letter, and the leases of two members, a recovery holder and an orphan lane.
func setupOps(t *testing.T) *opsBundle {
	t.Helper()
	b := &opsBundle{url: testdb.URL(t), schema: testdb.NewSchema(t), prefix: "ops_"}
	r := b.run(t, "migrate")
	if r.code != exitOK || !strings.Contains(r.stdout, "applied migrations [1]") {
		t.Fatalf("migrate: code %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = b.run(t, "migrate")
	if r.code != exitOK || !strings.Contains(r.stdout, "up to date") {
		t.Fatalf("second migrate: code %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	b.db = testdb.Open(t, "pgx")
	ctx := t.Context()

	var routes relayer.Routes
	if err := relayer.AddType[opsEvent](&routes, relayer.Route{Transport: "nats", Destination: "ops.events"}); err != nil {
		t.Fatal(err)
	}
	if err := relayer.AddType[opsOrderedEvent](&routes, relayer.Route{Transport: "nats", Destination: "ops.ordered", Ordered: true}); err != nil {
		t.Fatal(err)
	}
	w, err := enlist.NewWriter(relayer.Outbox{Schema: b.schema, TablePrefix: b.prefix, Routes: &routes}, enlist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []*uuid.UUID{&b.eligible, &b.scheduled, &b.parked, &b.dead} {
		if *id, err = relayer.NewID(); err != nil {
			t.Fatal(err)
		}
	}
	err = w.RunInTx(ctx, b.db, nil, func(tx *enlist.Tx) error {
		return tx.PublishAll(ctx,
			relayer.NewOutgoing(opsEvent{1}, relayer.WithID(b.eligible)),
			relayer.NewOutgoing(opsEvent{2}, relayer.WithID(b.scheduled), relayer.DeliverAt(time.Now().Add(time.Hour))),
			relayer.NewOutgoing(opsOrderedEvent{3}, relayer.WithID(b.parked), relayer.Key("customer-7")),
		)
	})
	if err != nil {
		t.Fatal(err)
	}
	t2 := tablesOf(store.Options{Schema: b.schema, TablePrefix: b.prefix})
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := b.db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`UPDATE `+t2.outbox+` SET parked_at = now(), attempts = 5, last_error = 'broker said no' WHERE id = $1`, b.parked)
	exec(`INSERT INTO `+t2.dead+` (id, message_type, transport, destination, body, headers, ordering_key, attempts, last_error, reason, created_at)
VALUES ($1, 'ops.Dead', 'nats', 'ops.dead', '\x7b7d', '\x0000000000000000', 'k1', 9, 'too large', 'permanent failure', now())`, b.dead)
	lease := func(name, owner string, token uuid.UUID, ttl string) {
		exec(`INSERT INTO `+t2.leases+` (name, owner, owner_token, expires_at) VALUES ($1, $2, $3, now() + $4::interval)`,
			name, owner, token, ttl)
	}
	a, c, gone := uuid.New(), uuid.New(), uuid.New()
	lease("member:aaa", "worker-a", a, "1 minute")
	lease("lane:0", "worker-a", a, "1 minute")
	lease("lane:1", "worker-a", a, "1 minute")
	lease("lane:2", "worker-a", a, "1 minute")
	lease("lane:7", "worker-a", a, "1 minute")
	lease("member:ccc", "worker-c", c, "1 minute")
	lease("lane:3", "worker-c", c, "1 minute")
	lease("lane:9", "worker-gone", gone, "1 minute")
	lease("lane:10", "worker-a", a, "-1 minute") // expired: not shown
	lease("recovery", "host/42", uuid.New(), "1 minute")
	return b
}

func TestSchemaCommand(t *testing.T) {
	t.Parallel()
	r := runCmd(t, "schema", "--schema", "messaging", "--prefix", "orders_")
	if r.code != exitOK {
		t.Fatalf("code %d, stderr %q", r.code, r.stderr)
	}
	want, err := store.SchemaSQL(store.Options{Schema: "messaging", TablePrefix: "orders_"})
	if err != nil {
		t.Fatal(err)
	}
	if r.stdout != want {
		t.Errorf("schema printed\n%s\nwant\n%s", r.stdout, want)
	}
}

func TestStatsJSON(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	r := b.run(t, "stats", "--json")
	if r.code != exitOK {
		t.Fatalf("code %d, stderr %q", r.code, r.stderr)
	}
	var got statsReport
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("stats --json printed %q: %v", r.stdout, err)
	}
	if got.Schema != b.schema || got.Prefix != b.prefix {
		t.Errorf("schema, prefix = %q, %q", got.Schema, got.Prefix)
	}
	if got.Eligible != 1 || got.Scheduled != 1 || got.Claimed != 0 || got.Parked != 1 || got.ParkedKeys != 1 || got.Dead != 1 {
		t.Errorf("counts = %+v", got)
	}
	if got.OldestAge < 0 || got.OldestAge > 60 {
		t.Errorf("oldest eligible age = %v s", got.OldestAge)
	}
	if len(got.Members) != 2 {
		t.Fatalf("members = %+v, want 2", got.Members)
	}
	if m := got.Members[0]; m.ID != "aaa" || m.Owner != "worker-a" || !equalInts(m.Lanes, []int{0, 1, 2, 7}) {
		t.Errorf("member 0 = %+v", m)
	}
	if m := got.Members[1]; m.ID != "ccc" || !equalInts(m.Lanes, []int{3}) {
		t.Errorf("member 1 = %+v", m)
	}
	if !equalInts(got.OrphanLanes, []int{9}) {
		t.Errorf("orphan lanes = %v, want [9]", got.OrphanLanes)
	}
	if got.Recovery == nil || got.Recovery.Owner != "host/42" {
		t.Errorf("recovery = %+v", got.Recovery)
	}

	r = b.run(t, "stats")
	for _, want := range []string{"eligible", "scheduled", "parked", "1 rows, 1 keys", "host/42", "0-2,7", "worker-c"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stats output lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestStatsWatchStopsOnCancel(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2500*time.Millisecond)
	defer cancel()
	var stdout, stderr strings.Builder
	code := run(ctx, append([]string{"stats", "--json", "--watch"}, b.flags()...), &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("code %d, stderr %q", code, stderr.String())
	}
	dec := json.NewDecoder(strings.NewReader(stdout.String()))
	n := 0
	for dec.More() {
		var s statsReport
		if err := dec.Decode(&s); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n < 2 {
		t.Errorf("%d refreshes in 2.5s, want at least 2", n)
	}
}

func TestLanes(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	r := b.run(t, "lanes")
	if r.code != exitOK {
		t.Fatalf("code %d, stderr %q", r.code, r.stderr)
	}
	for _, want := range []string{"aaa", "worker-a", "0-2,7", "ccc", "(no live member)", "9"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("lanes output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "10") {
		t.Errorf("an expired lane lease is shown:\n%s", r.stdout)
	}
}

func TestDeadAndParkedList(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	r := b.run(t, "dead", "list")
	if r.code != exitOK {
		t.Fatalf("dead list: code %d, stderr %q", r.code, r.stderr)
	}
	for _, want := range []string{b.dead.String(), "ops.Dead", "ops.dead", "k1", "9", "permanent failure", "too large"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("dead list lacks %q:\n%s", want, r.stdout)
		}
	}
	r = b.run(t, "parked", "list", "--json")
	if r.code != exitOK {
		t.Fatalf("parked list: code %d, stderr %q", r.code, r.stderr)
	}
	var row stuckRow
	if err := json.Unmarshal([]byte(r.stdout), &row); err != nil {
		t.Fatalf("parked list --json printed %q: %v", r.stdout, err)
	}
	if row.ID != b.parked.String() || row.Key != "customer-7" || row.Attempts != 5 || row.LastError != "broker said no" ||
		row.Destination != "ops.ordered" {
		t.Errorf("parked row = %+v", row)
	}
}

func TestEmptyOutbox(t *testing.T) {
	t.Parallel()
	url, schema := testdb.URL(t), testdb.NewSchema(t)
	flags := []string{"--database-url", url, "--schema", schema}
	if r := runCmd(t, append([]string{"migrate"}, flags...)...); r.code != exitOK {
		t.Fatalf("migrate: %q", r.stderr)
	}
	for _, args := range [][]string{{"lanes"}, {"dead", "list"}, {"parked", "list"}} {
		r := runCmd(t, append(args, flags...)...)
		if r.code != exitOK || !strings.HasPrefix(r.stdout, "no ") {
			t.Errorf("%v: code %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
	r := runCmd(t, append([]string{"stats", "--json"}, flags...)...)
	var s statsReport
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || s.Eligible != 0 || s.Members == nil {
		t.Errorf("stats --json on an empty outbox: %q, %v", r.stdout, err)
	}
}

func TestStatsWithoutTables(t *testing.T) {
	t.Parallel()
	r := runCmd(t, "stats", "--database-url", testdb.URL(t), "--schema", testdb.NewSchema(t))
	if r.code != exitFail || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "does not exist") {
		t.Errorf("code %d, stderr %q", r.code, r.stderr)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// testTables are the quoted names of an outbox's tables, for the raw SQL
// that sets up states no API produces yet.
type testTables struct {
	outbox, dead, leases string
}

func tablesOf(o store.Options) testTables {
	schema := o.Schema
	if schema == "" {
		schema = store.SchemaDefault
	}
	q := func(name string) string { return pgx.Identifier{schema, o.TablePrefix + name}.Sanitize() }
	return testTables{outbox: q("outbox"), dead: q("dead"), leases: q("relayer_leases")}
}
