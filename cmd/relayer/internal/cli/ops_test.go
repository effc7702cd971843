package cli

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/headers"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/internal/vocab"
	"github.com/relayer-go/relayer/internal/workerstore"
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
	if r.Code != command.ExitOK || !strings.Contains(r.Stdout, "applied migrations "+allMigrations(t)) {
		t.Fatalf("migrate: code %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	r = b.run(t, "migrate")
	if r.Code != command.ExitOK || !strings.Contains(r.Stdout, "up to date") {
		t.Fatalf("second migrate: code %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
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
	t2 := tablesOf(store.Tables{Schema: b.schema, TablePrefix: b.prefix})
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := b.db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`UPDATE `+t2.outbox+` SET parked_at = now(), attempts = 5, last_error = 'broker said no' WHERE id = $1`, b.parked)
	exec(`INSERT INTO `+t2.dead+` (id, message_type, transport, destination, body, headers, ordering_key, attempts, last_error, reason, created_at)
VALUES ($1, 'ops.Dead', 'nats', 'ops.dead', '\x7b7d', '\x0100000000000000', 'k1', 9, 'too large', 'permanent', now())`, b.dead)
	lease := func(name, owner string, token uuid.UUID, ttl string) {
		exec(`INSERT INTO `+t2.leases+` (name, owner, owner_token, expires_at) VALUES ($1, $2, $3, now() + $4::interval)`,
			name, owner, token, ttl)
	}
	// As a Runner takes them: a member's lease carries its own token, the
	// lane leases its lane group's, and record the member's name as owner.
	a, c, gone, group := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	lease("member:aaa", "worker-a", a, "1 minute")
	lease("lane:0", "worker-a", group, "1 minute")
	lease("lane:1", "worker-a", group, "1 minute")
	lease("lane:2", "worker-a", group, "1 minute")
	lease("lane:7", "worker-a", group, "1 minute")
	lease("member:ccc", "worker-c", c, "1 minute")
	lease("lane:3", "worker-c", group, "1 minute")
	lease("lane:9", "worker-gone", gone, "1 minute")
	lease("lane:10", "worker-a", a, "-1 minute") // expired: not shown
	lease("recovery", "host/42", uuid.New(), "1 minute")
	return b
}

func TestSchemaCommand(t *testing.T) {
	t.Parallel()
	r := runCmd(t, "schema", "--schema", "messaging", "--prefix", "orders_")
	if r.Code != command.ExitOK {
		t.Fatalf("code %d, stderr %q", r.Code, r.Stderr)
	}
	want, err := store.SchemaSQL(store.Tables{Schema: "messaging", TablePrefix: "orders_"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Stdout != want {
		t.Errorf("schema printed\n%s\nwant\n%s", r.Stdout, want)
	}
}

func TestStatsJSON(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	st, err := workerstore.New(b.db, store.Tables{Schema: b.schema, TablePrefix: b.prefix})
	if err != nil {
		t.Fatal(err)
	}
	since := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	pause := store.Pause{Transport: "nats", Destination: "ops.events", Since: since, NextProbe: since.Add(2 * time.Minute), LastError: "nats: no responders"}
	if err := st.PublishPauses(t.Context(), uuid.New(), "worker-p", []store.Pause{pause}); err != nil {
		t.Fatal(err)
	}
	r := b.run(t, "stats", "--json")
	if r.Code != command.ExitOK {
		t.Fatalf("code %d, stderr %q", r.Code, r.Stderr)
	}
	var got statsReport
	if err := json.Unmarshal([]byte(r.Stdout), &got); err != nil {
		t.Fatalf("stats --json printed %q: %v", r.Stdout, err)
	}
	if got.Schema != b.schema || got.Prefix != b.prefix {
		t.Errorf("schema, prefix = %q, %q", got.Schema, got.Prefix)
	}
	if got.Eligible != 1 || got.Scheduled != 1 || got.Claimed != 0 || got.Parked != 1 || got.ParkedKeys != 1 || got.Dead != 1 {
		t.Errorf("counts = %+v", got)
	}
	pause.Owner = "worker-p"
	if len(got.Paused) != 1 || !got.Paused[0].Since.Equal(pause.Since) || got.Paused[0].Destination != pause.Destination || got.Paused[0].LastError != pause.LastError || got.Paused[0].Owner != "worker-p" {
		t.Errorf("paused = %+v, want %+v", got.Paused, pause)
	}
	if len(got.DeadByReason) != 1 || got.DeadByReason["permanent"] != 1 || got.Retrying != 0 || got.OldestParkedAge < 0 || got.OldestParkedAge > 60 {
		t.Errorf("dead by reason %v, retrying %d, oldest parked %vs", got.DeadByReason, got.Retrying, got.OldestParkedAge)
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
	for _, want := range []string{"1 rows, 1 keys", "host/42", "0-2,7", "worker-c",
		"1 (permanent 1)", "nats ops.events by worker-p", "nats: no responders"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("stats output lacks %q:\n%s", want, r.Stdout)
		}
	}
	// The backlog in the words the console uses too, one line each.
	for _, word := range vocab.All {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(word) + `  +\S`).MatchString(r.Stdout) {
			t.Errorf("stats output has no line for %q:\n%s", word, r.Stdout)
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
	if code != command.ExitOK {
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
	if r.Code != command.ExitOK {
		t.Fatalf("code %d, stderr %q", r.Code, r.Stderr)
	}
	for _, want := range []string{"aaa", "worker-a", "0-2,7", "ccc", "(no live member)", "9"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("lanes output lacks %q:\n%s", want, r.Stdout)
		}
	}
	// The members hold their lanes, as the console shows them: matched by
	// the owner's name, not the token.
	if !regexp.MustCompile(`(?m)^\s*aaa\s+worker-a\s+0-2,7\s+4$`).MatchString(r.Stdout) ||
		!regexp.MustCompile(`(?m)^\s*ccc\s+worker-c\s+3\s+1$`).MatchString(r.Stdout) ||
		!regexp.MustCompile(`(?m)^\s*\(no live member\)\s+-\s+9\s+1$`).MatchString(r.Stdout) {
		t.Errorf("lanes by member:\n%s", r.Stdout)
	}
	if strings.Contains(r.Stdout, "10") {
		t.Errorf("an expired lane lease is shown:\n%s", r.Stdout)
	}
}

// The lane count the first writer recorded is shown, and --set changes it
// only once the outbox holds no ordered row and no live ordered worker.
func TestLanesSet(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	r := b.run(t, "lanes")
	if r.Code != command.ExitOK || !strings.Contains(r.Stdout, "lane count: 32") {
		t.Fatalf("code %d, stdout %q, stderr %q; want the recorded count 32", r.Code, r.Stdout, r.Stderr)
	}
	r = b.run(t, "lanes", "--set", "64")
	if r.Code == command.ExitOK || !strings.Contains(r.Stderr, "not drained") || !strings.Contains(r.Stderr, "1 ordered rows") {
		t.Errorf("--set with a parked ordered row and live workers: code %d, stderr %q; want refused", r.Code, r.Stderr)
	}
	_, err := b.db.Exec(`DELETE FROM "` + b.schema + `".ops_outbox WHERE lane IS NOT NULL`)
	if err == nil {
		_, err = b.db.Exec(`DELETE FROM "` + b.schema + `".ops_relayer_leases`)
	}
	if err != nil {
		t.Fatal(err)
	}
	r = b.run(t, "lanes", "--set", "64")
	if r.Code != command.ExitOK || !strings.Contains(r.Stdout, "lane count 64 recorded") {
		t.Fatalf("--set on a drained outbox: code %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	r = b.run(t, "lanes", "--json")
	if r.Code != command.ExitOK || !strings.Contains(r.Stdout, `"lanes":64`) {
		t.Errorf("--json: %q", r.Stdout)
	}
	r = b.run(t, "lanes", "--set", "0")
	if r.Code == command.ExitOK {
		t.Errorf("--set 0 accepted")
	}
}

func TestDeadAndParkedList(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	r := b.run(t, "dead", "list")
	if r.Code != command.ExitOK {
		t.Fatalf("dead list: code %d, stderr %q", r.Code, r.Stderr)
	}
	for _, want := range []string{b.dead.String(), "ops.Dead", "ops.dead", "k1", "9", "permanent", "too large"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("dead list lacks %q:\n%s", want, r.Stdout)
		}
	}
	r = b.run(t, "parked", "list", "--json")
	if r.Code != command.ExitOK {
		t.Fatalf("parked list: code %d, stderr %q", r.Code, r.Stderr)
	}
	var row parkedSummary
	if err := json.Unmarshal([]byte(r.Stdout), &row); err != nil {
		t.Fatalf("parked list --json printed %q: %v", r.Stdout, err)
	}
	if row.HeadID != b.parked.String() || row.Key != "customer-7" || row.Attempts != 5 || row.LastError != "broker said no" ||
		row.Destination != "ops.ordered" || row.Waiting != 0 {
		t.Errorf("parked key = %+v", row)
	}
}

func TestEmptyOutbox(t *testing.T) {
	t.Parallel()
	url, schema := testdb.URL(t), testdb.NewSchema(t)
	flags := []string{"--database-url", url, "--schema", schema}
	if r := runCmd(t, append([]string{"migrate"}, flags...)...); r.Code != command.ExitOK {
		t.Fatalf("migrate: %q", r.Stderr)
	}
	for _, args := range [][]string{{"lanes"}, {"dead", "list"}, {"parked", "list"}} {
		r := runCmd(t, append(args, flags...)...)
		if r.Code != command.ExitOK || !strings.HasPrefix(r.Stdout, "no ") {
			t.Errorf("%v: code %d, stdout %q, stderr %q", args, r.Code, r.Stdout, r.Stderr)
		}
	}
	r := runCmd(t, append([]string{"stats", "--json"}, flags...)...)
	var s statsReport
	if err := json.Unmarshal([]byte(r.Stdout), &s); err != nil || s.Eligible != 0 || s.Members == nil {
		t.Errorf("stats --json on an empty outbox: %q, %v", r.Stdout, err)
	}
}

// Without the outbox's tables, every command that reads them says how to
// make them: the migrate command with the schema and prefix given.
func TestCommandsWithoutTablesSayHowToMigrate(t *testing.T) {
	t.Parallel()
	schema := testdb.NewSchema(t)
	for _, args := range [][]string{{"stats"}, {"dead", "list"}, {"parked", "list"}, {"lanes"}, {"dead", "purge", "--all"}} {
		r := runCmd(t, append(args, "--database-url", testdb.URL(t), "--schema", schema, "--prefix", "p_")...)
		want := "relayer migrate --database-url URL --schema " + schema + " --prefix p_"
		if r.Code != command.ExitFail || strings.Count(r.Stderr, "\n") != 1 || !strings.Contains(r.Stderr, want) {
			t.Errorf("%v: code %d, stderr %q; want one line naming %q", args, r.Code, r.Stderr, want)
		}
	}
}

// migrate --dry-run lists the steps an outbox lacks and --show-sql prints
// their SQL; neither applies anything.
func TestMigrateDryRunAndShowSQL(t *testing.T) {
	t.Parallel()
	url, schema := testdb.URL(t), testdb.NewSchema(t)
	flags := []string{"--database-url", url, "--schema", schema}
	r := runCmd(t, append([]string{"migrate", "--dry-run"}, flags...)...)
	steps, err := store.Migrations(store.Tables{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range steps {
		if want := fmt.Sprintf("would apply migration %d: %s", m.Version, m.Name); r.Code != command.ExitOK || !strings.Contains(r.Stdout, want) {
			t.Errorf("migrate --dry-run: code %d, stdout %q; want %q", r.Code, r.Stdout, want)
		}
	}
	r = runCmd(t, append([]string{"migrate", "--show-sql"}, flags...)...)
	if r.Code != command.ExitOK || !strings.Contains(r.Stdout, "-- migration 1: ") || !strings.Contains(r.Stdout, `CREATE TABLE IF NOT EXISTS "`+schema+`".`) {
		t.Errorf("migrate --show-sql: code %d, stdout %q", r.Code, r.Stdout)
	}
	if r := runCmd(t, append([]string{"stats"}, flags...)...); r.Code != command.ExitFail {
		t.Errorf("stats after a dry run: code %d; the tables must still be missing", r.Code)
	}
	if r := runCmd(t, append([]string{"migrate"}, flags...)...); r.Code != command.ExitOK {
		t.Fatalf("migrate: %q", r.Stderr)
	}
	r = runCmd(t, append([]string{"migrate", "--dry-run"}, flags...)...)
	if r.Code != command.ExitOK || !strings.Contains(r.Stdout, "up to date: nothing to apply") {
		t.Errorf("migrate --dry-run when up to date: %q", r.Stdout)
	}
}

// Every command that changes rows prints, with --json, the rows it touched,
// its filter and the ids, and with --dry-run changes nothing.
func TestChangesReportAsJSONAndDryRun(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	for _, c := range []struct {
		args []string
		id   string
	}{
		{[]string{"dead", "requeue", "--key", "k1"}, b.dead.String()},
		{[]string{"dead", "purge", "--all"}, b.dead.String()},
		{[]string{"parked", "retry", "--key", "customer-7"}, b.parked.String()},
		{[]string{"parked", "skip", "--key", "customer-7"}, b.parked.String()},
	} {
		r := b.run(t, append(c.args, "--dry-run", "--json")...)
		var rep changeReport
		if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil || r.Code != command.ExitOK {
			t.Fatalf("%v --dry-run --json: code %d, %q, %v (stderr %q)", c.args, r.Code, r.Stdout, err, r.Stderr)
		}
		if rep.Command != c.args[0]+" "+c.args[1] || !rep.DryRun || rep.Rows != 1 || len(rep.IDs) != 1 || rep.IDs[0] != c.id {
			t.Errorf("%v --dry-run --json = %+v, want one row, id %s", c.args, rep, c.id)
		}
		r = b.run(t, append(c.args, "--dry-run")...)
		if r.Code != command.ExitOK || !strings.Contains(r.Stdout, "would ") || !strings.Contains(r.Stdout, "dry run: nothing changed") {
			t.Errorf("%v --dry-run: %q", c.args, r.Stdout)
		}
	}
	// Nothing changed: the dead letter and the parked key are still there.
	if r := b.run(t, "dead", "list", "--json"); !strings.Contains(r.Stdout, b.dead.String()) {
		t.Errorf("a dry run changed the dead letters: %q", r.Stdout)
	}
	if r := b.run(t, "parked", "list", "--json"); !strings.Contains(r.Stdout, b.parked.String()) {
		t.Errorf("a dry run changed the parked keys: %q", r.Stdout)
	}
	r := b.run(t, "dead", "requeue", "--key", "k1", "--json")
	var rep changeReport
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil || rep.DryRun || rep.Rows != 1 || rep.Filter["key"] != "k1" {
		t.Errorf("dead requeue --json = %+v, %v (%q)", rep, err, r.Stdout)
	}
	if r := b.run(t, "dead", "list", "--json"); strings.Contains(r.Stdout, b.dead.String()) {
		t.Errorf("requeue changed nothing: %q", r.Stdout)
	}
}

// allMigrations is how the migrate command prints the versions of every
// migration step, such as "[1 2]".
func allMigrations(t *testing.T) string {
	t.Helper()
	steps, err := store.Migrations(store.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	versions := make([]int, len(steps))
	for i, m := range steps {
		versions[i] = m.Version
	}
	return fmt.Sprint(versions)
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

func tablesOf(o store.Tables) testTables {
	schema := o.Schema
	if schema == "" {
		schema = store.SchemaDefault
	}
	q := func(name string) string { return pgx.Identifier{schema, o.TablePrefix + name}.Sanitize() }
	return testTables{outbox: q("outbox"), dead: q("dead"), leases: q("relayer_leases")}
}

// redriveBundle is an outbox holding four dead letters and two parked keys,
// put in place by SQL as the workers would leave them.
type redriveBundle struct {
	opsBundle
	tables testTables
	// Dead letters, newest first: placed (two headers, a text body),
	// shipped (ordered, a binary body), broken (headers that do not decode)
	// and old (dead for 40 days).
	placed, shipped, broken, old uuid.UUID
	// cust1 is parked at its head with two rows waiting behind it; cust2, a
	// single row, was parked two hours ago.
	cust1 [3]uuid.UUID
	cust2 uuid.UUID
}

// setupRedrive migrates an outbox with the migrate command and fills it.
func setupRedrive(t *testing.T) *redriveBundle {
	t.Helper()
	b := &redriveBundle{opsBundle: opsBundle{url: testdb.URL(t), schema: testdb.NewSchema(t), prefix: "rd_"}}
	if r := b.run(t, "migrate"); r.Code != command.ExitOK {
		t.Fatalf("migrate: code %d, stderr %q", r.Code, r.Stderr)
	}
	b.db = testdb.Open(t, "pgx")
	b.tables = tablesOf(store.Tables{Schema: b.schema, TablePrefix: b.prefix})
	ids := make([]uuid.UUID, 8)
	for i := range ids {
		ids[i] = uuid.Must(relayer.NewID())
	}
	slices.SortFunc(ids, func(a, c uuid.UUID) int { return bytes.Compare(a[:], c[:]) })
	b.placed, b.shipped, b.broken, b.old = ids[0], ids[1], ids[2], ids[3]
	b.cust1 = [3]uuid.UUID{ids[4], ids[5], ids[6]}
	b.cust2 = ids[7]

	two, err := headers.Encode([]headers.Header{
		{Name: "content-type", Value: []byte("application/json")},
		{Name: "blob", Value: []byte{0, 1, 2}},
	})
	if err != nil {
		t.Fatal(err)
	}
	none, err := headers.Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	badVersion := []byte{2, 0, 0, 0, 0, 0, 0, 0}
	dead := func(id uuid.UUID, typ, dest string, key any, lane any, body, hs []byte, attempts int, lastErr any, reason, age string) {
		t.Helper()
		b.exec(t, `INSERT INTO `+b.tables.dead+` (id, message_type, transport, destination, body, headers, ordering_key, lane,
    created_at, attempts, last_error, reason, dead_at, trace_parent)
VALUES ($1, $2, 'nats', $3, $4, $5, $6, $7, now() - interval '50 days', $8, $9, $10, now() - $11::interval,
    '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01')`,
			id, typ, dest, body, hs, key, lane, attempts, lastErr, reason, age)
	}
	dead(b.placed, "orders.Placed", "orders.events", nil, nil, []byte(`{"n":1}`), two, 1,
		"broker: message refused\n  schema mismatch", store.ReasonPermanent, "1 minute")
	dead(b.shipped, "orders.Shipped", "orders.ordered", "k2", 3, []byte{0x00, 0xff}, none, 8, "timeout", store.ReasonExhausted, "2 minutes")
	dead(b.broken, "orders.Broken", "orders.events", nil, nil, []byte("x"), badVersion, 0, nil, store.ReasonCorrupt, "3 minutes")
	dead(b.old, "orders.Old", "orders.events", nil, nil, []byte("old"), none, 5, "gone", store.ReasonExhausted, "40 days")

	row := func(id uuid.UUID, typ, dest, key string, lane int) {
		t.Helper()
		b.exec(t, `INSERT INTO `+b.tables.outbox+` (id, message_type, transport, destination, body, headers, ordering_key, lane)
VALUES ($1, $2, 'nats', $3, '\x7b7d', $4, $5, $6)`, id, typ, dest, none, key, lane)
	}
	for _, id := range b.cust1 {
		row(id, "orders.Placed", "orders.ordered", "cust-1", 5)
	}
	row(b.cust2, "orders.Other", "orders.other", "cust-2", 6)
	b.exec(t, `UPDATE `+b.tables.outbox+` SET parked_at = now(), attempts = 1, last_error = 'refused' WHERE id = $1`, b.cust1[0])
	b.exec(t, `UPDATE `+b.tables.outbox+` SET parked_at = now() - interval '2 hours', attempts = 3, last_error = 'no route'
WHERE id = $1`, b.cust2)
	return b
}

// exec runs a statement on the bundle's database or fails the test.
func (b *opsBundle) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if _, err := b.db.ExecContext(t.Context(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// count returns the number of rows of table matching where.
func (b *opsBundle) count(t *testing.T, table, where string, args ...any) int {
	t.Helper()
	var n int
	if err := b.db.QueryRowContext(t.Context(), `SELECT count(*) FROM `+table+` WHERE `+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// mustRun runs a command that must succeed and returns its output.
func (b *opsBundle) mustRun(t *testing.T, args ...string) result {
	t.Helper()
	r := b.run(t, args...)
	if r.Code != command.ExitOK {
		t.Fatalf("%v: code %d, stdout %q, stderr %q", args, r.Code, r.Stdout, r.Stderr)
	}
	return r
}

// jsonLines decodes the objects a --json list printed, one a line.
func jsonLines[T any](t *testing.T, out string) []T {
	t.Helper()
	var list []T
	for line := range strings.Lines(out) {
		var v T
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("line %q is not a JSON object: %v", line, err)
		}
		list = append(list, v)
	}
	return list
}

// deadIDs returns the ids of dead letters as printed by --json.
func deadIDs(list []deadSummary) []string {
	ids := make([]string, len(list))
	for i, d := range list {
		ids[i] = d.ID
	}
	return ids
}

func TestRedriveDeadList(t *testing.T) {
	t.Parallel()
	b := setupRedrive(t)
	r := b.mustRun(t, "dead", "list")
	lines := strings.Split(strings.TrimSuffix(r.Stdout, "\n"), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "ID") {
		t.Fatalf("dead list: want a header and 4 rows:\n%s", r.Stdout)
	}
	for _, col := range []string{"TYPE", "DESTINATION", "KEY", "ATTEMPTS", "DEAD AT", "REASON", "LAST ERROR"} {
		if !strings.Contains(lines[0], col) {
			t.Errorf("header %q lacks %s", lines[0], col)
		}
	}
	for i, want := range [][]string{
		{b.placed.String(), "orders.Placed", "orders.events", " - ", "permanent", "broker: message refused schema mismatch"},
		{b.shipped.String(), "orders.Shipped", "k2", " 8 ", "exhausted", "timeout"},
		{b.broken.String(), "orders.Broken", "corrupt"},
		{b.old.String(), "orders.Old", "gone"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i+1], w) {
				t.Errorf("row %d %q lacks %q", i+1, lines[i+1], w)
			}
		}
	}

	got := jsonLines[deadSummary](t, b.mustRun(t, "dead", "list", "--type", "orders.Placed", "--json").Stdout)
	if len(got) != 1 {
		t.Fatalf("--type orders.Placed: %+v", got)
	}
	if d := got[0]; d.ID != b.placed.String() || d.Transport != "nats" || d.Destination != "orders.events" || d.Key != "" ||
		d.Lane != nil || d.Attempts != 1 || d.Reason != "permanent" || d.LastError != "broker: message refused\n  schema mismatch" ||
		time.Since(d.DeadAt) < time.Minute || d.Corrupt != "" {
		t.Errorf("--type orders.Placed: %+v", d)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--reason", "exhausted"}, []string{b.shipped.String(), b.old.String()}},
		{[]string{"--reason", "over_limit"}, nil}, // the console offers it too
		{[]string{"--older-than", "39d"}, []string{b.old.String()}},
		{[]string{"--older-than", "41d"}, nil},
		{[]string{"--destination", "orders.events", "--older-than", "150s"}, []string{b.broken.String(), b.old.String()}},
		{[]string{"--key", "k2"}, []string{b.shipped.String()}},
		{[]string{"--id", b.old.String() + "," + b.placed.String(), "--id", b.broken.String()},
			[]string{b.placed.String(), b.broken.String(), b.old.String()}},
		{[]string{"--id", uuid.NewString()}, nil},
	} {
		got := deadIDs(jsonLines[deadSummary](t, b.mustRun(t, append([]string{"dead", "list", "--json"}, tc.args...)...).Stdout))
		if !slices.Equal(got, tc.want) && (len(got) != 0 || len(tc.want) != 0) {
			t.Errorf("%v: ids %v, want %v", tc.args, got, tc.want)
		}
	}
	if d := jsonLines[deadSummary](t, b.mustRun(t, "dead", "list", "--key", "k2", "--json").Stdout); d[0].Lane == nil || *d[0].Lane != 3 {
		t.Errorf("ordered dead letter without its lane: %+v", d[0])
	}

	r = b.mustRun(t, "dead", "list", "--limit", "2")
	if strings.Count(r.Stdout, "\n") != 4 || !strings.Contains(r.Stdout, "(first 2 rows; raise --limit for more)") {
		t.Errorf("--limit 2:\n%s", r.Stdout)
	}
	r = b.mustRun(t, "dead", "list", "--type", "nothing")
	if !strings.HasPrefix(r.Stdout, "no dead letters matching the filters in outbox in schema "+b.schema) {
		t.Errorf("empty selection: %q", r.Stdout)
	}
	for _, tc := range []struct{ args, want string }{
		{"--reason bogus", `--reason "bogus": want one of permanent, exhausted, corrupt, skipped, over_limit`},
		{"--limit 10001", "--limit 10001"},
		{"--older-than -1h", "must not be negative"},
		{"--older-than 3x", "90m, 48h or 30d"},
		{"--id nope", `"nope" is not a message id`},
	} {
		r := b.run(t, append([]string{"dead", "list"}, strings.Fields(tc.args)...)...)
		if r.Code != command.ExitUsage || !strings.Contains(r.Stderr, tc.want) {
			t.Errorf("dead list %s: code %d, stderr %q, want %q", tc.args, r.Code, r.Stderr, tc.want)
		}
	}
}

func TestRedriveDeadShow(t *testing.T) {
	t.Parallel()
	b := setupRedrive(t)
	r := b.mustRun(t, "dead", "show", b.placed.String())
	for _, want := range []string{
		"id            " + b.placed.String(), "type          orders.Placed", "transport     nats",
		"destination   orders.events", "key           -", "lane          - (unordered)", "attempts      1",
		"last error    broker: message refused schema mismatch", "reason        permanent",
		"trace parent  00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "deliver at    -",
		"headers (2):\n  content-type: application/json\n  blob: AAEC (base64)\n",
		"body (7 bytes of text):\n{\"n\":1}\n",
	} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("dead show lacks %q:\n%s", want, r.Stdout)
		}
	}

	// The id may come after the flags, too.
	var d deadDetail
	r = runCmd(t, append(append([]string{"dead", "show", "--json"}, b.flags()...), b.placed.String())...)
	if err := json.Unmarshal([]byte(r.Stdout), &d); err != nil {
		t.Fatalf("dead show --json: code %d, stdout %q, stderr %q: %v", r.Code, r.Stdout, r.Stderr, err)
	}
	wantHeaders := []headerText{{"content-type", "application/json", "text"}, {"blob", "AAEC", "base64"}}
	if d.ID != b.placed.String() || !slices.Equal(d.Headers, wantHeaders) || d.Body != `{"n":1}` || d.BodyEncoding != "text" ||
		d.TraceParent == "" || d.DeliverAt != nil || time.Since(d.CreatedAt) < 49*24*time.Hour {
		t.Errorf("dead show --json: %+v", d)
	}

	d = deadDetail{}
	if err := json.Unmarshal([]byte(b.mustRun(t, "dead", "show", b.shipped.String(), "--json").Stdout), &d); err != nil {
		t.Fatal(err)
	}
	if d.Body != "AP8=" || d.BodyEncoding != "base64" || d.Headers == nil || len(d.Headers) != 0 || d.Lane == nil || *d.Lane != 3 {
		t.Errorf("binary body: %+v", d)
	}
	r = b.mustRun(t, "dead", "show", b.shipped.String())
	if !strings.Contains(r.Stdout, "headers: none") || !strings.Contains(r.Stdout, "body (base64, not UTF-8 text):\nAP8=\n") ||
		!strings.Contains(r.Stdout, "lane          3") {
		t.Errorf("binary body:\n%s", r.Stdout)
	}

	r = b.mustRun(t, "dead", "show", b.broken.String())
	if !strings.Contains(r.Stdout, "headers: the stored headers do not decode: ") ||
		!strings.Contains(r.Stdout, "unsupported header format version") || !strings.Contains(r.Stdout, "reason        corrupt") {
		t.Errorf("corrupt row:\n%s", r.Stdout)
	}
	d = deadDetail{}
	if err := json.Unmarshal([]byte(b.mustRun(t, "dead", "show", b.broken.String(), "--json").Stdout), &d); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(d.Corrupt, "unsupported header format version") || d.Headers != nil || d.Body != "x" {
		t.Errorf("corrupt row --json: %+v", d)
	}

	missing := uuid.NewString()
	if r := b.run(t, "dead", "show", missing); r.Code != command.ExitFail || !strings.Contains(r.Stderr, "no dead letter with id "+missing) {
		t.Errorf("unknown id: code %d, stderr %q", r.Code, r.Stderr)
	}
	for _, args := range [][]string{{"dead", "show"}, {"dead", "show", "nope"}, {"dead", "show", missing, missing}} {
		if r := b.run(t, args...); r.Code != command.ExitUsage {
			t.Errorf("%v: code %d, stderr %q", args, r.Code, r.Stderr)
		}
	}
}

func TestRedriveDeadRequeueAndPurge(t *testing.T) {
	t.Parallel()
	b := setupRedrive(t)
	for _, args := range [][]string{{"dead", "requeue"}, {"dead", "purge"}, {"dead", "requeue", "--older-than", "0s"}} {
		r := b.run(t, args...)
		if r.Code != command.ExitUsage || !strings.Contains(r.Stderr, "without --all") || !strings.Contains(r.Stderr, "--type") ||
			!strings.Contains(r.Stderr, "--older-than") {
			t.Errorf("%v: code %d, stderr %q", args, r.Code, r.Stderr)
		}
	}
	if r := b.run(t, "dead", "purge", "--all", "--type", "orders.Old"); r.Code != command.ExitUsage || !strings.Contains(r.Stderr, "not both") {
		t.Errorf("--all with a filter: code %d, stderr %q", r.Code, r.Stderr)
	}
	if n := b.count(t, b.tables.dead, "true"); n != 4 {
		t.Fatalf("a refused command changed the dead letters: %d left", n)
	}

	if r := b.mustRun(t, "dead", "requeue", "--type", "orders.Shipped"); r.Stdout != "requeued 1 dead letters\n" {
		t.Errorf("requeue: %q", r.Stdout)
	}
	if r := b.mustRun(t, "dead", "requeue", "--type", "orders.Shipped"); r.Stdout != "requeued 0 dead letters\n" {
		t.Errorf("second requeue: %q", r.Stdout)
	}
	var attempts, lane int
	var key, lastErr string
	var body []byte
	var parked sql.NullTime
	err := b.db.QueryRowContext(t.Context(), `SELECT attempts, lane, ordering_key, last_error, body, parked_at FROM `+
		b.tables.outbox+` WHERE id = $1`, b.shipped).Scan(&attempts, &lane, &key, &lastErr, &body, &parked)
	if err != nil {
		t.Fatalf("requeued row not in the outbox: %v", err)
	}
	if attempts != 0 || lane != 3 || key != "k2" || lastErr != "timeout" || !bytes.Equal(body, []byte{0, 0xff}) || parked.Valid {
		t.Errorf("requeued row: attempts %d, lane %d, key %q, last error %q, body %x, parked %v", attempts, lane, key, lastErr, body, parked)
	}
	if n := b.count(t, b.tables.dead, "id = $1", b.shipped); n != 0 {
		t.Errorf("requeued row still dead")
	}
	r := b.mustRun(t, "dead", "requeue", "--id", b.placed.String()+","+uuid.NewString())
	if r.Stdout != "requeued 1 dead letters\n" || b.count(t, b.tables.outbox, "id = $1 AND attempts = 0", b.placed) != 1 {
		t.Errorf("requeue --id: %q", r.Stdout)
	}

	if r := b.mustRun(t, "dead", "purge", "--older-than", "1h"); r.Stdout != "purged 1 dead letters\n" {
		t.Errorf("purge --older-than 1h: %q", r.Stdout)
	}
	if n := b.count(t, b.tables.dead, "id = $1", b.old); n != 0 {
		t.Errorf("purged row still dead")
	}
	if r := b.mustRun(t, "dead", "purge", "--older-than", "1h"); r.Stdout != "purged 0 dead letters\n" {
		t.Errorf("purge --older-than 1h of a fresh row: %q", r.Stdout)
	}
	if r := b.mustRun(t, "dead", "purge", "--all"); r.Stdout != "purged 1 dead letters\n" {
		t.Errorf("purge --all: %q", r.Stdout)
	}
	if n := b.count(t, b.tables.dead, "true"); n != 0 {
		t.Errorf("%d dead letters left after purge --all", n)
	}
	if r := b.mustRun(t, "dead", "list"); !strings.HasPrefix(r.Stdout, "no dead letters in outbox") {
		t.Errorf("dead list after purge --all: %q", r.Stdout)
	}
}

func TestRedriveParkedListAndRetry(t *testing.T) {
	t.Parallel()
	b := setupRedrive(t)
	r := b.mustRun(t, "parked", "list")
	lines := strings.Split(strings.TrimSuffix(r.Stdout, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("parked list: want a header and 2 rows:\n%s", r.Stdout)
	}
	for _, col := range []string{"KEY", "LANE", "HEAD ID", "TYPE", "DESTINATION", "ATTEMPTS", "PARKED AT", "WAITING", "LAST ERROR"} {
		if !strings.Contains(lines[0], col) {
			t.Errorf("header %q lacks %s", lines[0], col)
		}
	}
	if !strings.HasPrefix(lines[1], "cust-2") || !strings.Contains(lines[1], b.cust2.String()) || !strings.Contains(lines[1], "no route") ||
		!strings.HasPrefix(lines[2], "cust-1") || !strings.Contains(lines[2], b.cust1[0].String()) {
		t.Errorf("parked list, longest parked first:\n%s", r.Stdout)
	}
	list := jsonLines[parkedSummary](t, b.mustRun(t, "parked", "list", "--json").Stdout)
	if len(list) != 2 {
		t.Fatalf("parked list --json: %+v", list)
	}
	if p := list[1]; p.Key != "cust-1" || p.Lane != 5 || p.HeadID != b.cust1[0].String() || p.Type != "orders.Placed" ||
		p.Destination != "orders.ordered" || p.Attempts != 1 || p.LastError != "refused" || p.Waiting != 2 {
		t.Errorf("cust-1: %+v", p)
	}
	if list := jsonLines[parkedSummary](t, b.mustRun(t, "parked", "list", "--older-than", "1h", "--json").Stdout); len(list) != 1 ||
		list[0].Key != "cust-2" || list[0].Waiting != 0 || time.Since(list[0].ParkedAt) < time.Hour {
		t.Errorf("--older-than 1h: %+v", list)
	}
	if r := b.mustRun(t, "parked", "list", "--type", "orders.Placed", "--limit", "1"); !strings.Contains(r.Stdout, "cust-1") ||
		!strings.Contains(r.Stdout, "(first 1 rows; raise --limit for more)") {
		t.Errorf("--type --limit 1:\n%s", r.Stdout)
	}
	if r := b.mustRun(t, "parked", "list", "--key", "nobody"); !strings.HasPrefix(r.Stdout, "no parked keys matching the filters") {
		t.Errorf("empty selection: %q", r.Stdout)
	}

	for _, args := range [][]string{{"parked", "retry"}, {"parked", "retry", "--key", ""}} {
		if r := b.run(t, args...); r.Code != command.ExitUsage || !strings.Contains(r.Stderr, "without --all") || !strings.Contains(r.Stderr, "--key") {
			t.Errorf("%v: code %d, stderr %q", args, r.Code, r.Stderr)
		}
	}
	const released = "parked keys; each resumes at its head, in order\n"
	if r := b.mustRun(t, "parked", "retry", "--key", "cust-2"); r.Stdout != "released 1 "+released {
		t.Errorf("retry: %q", r.Stdout)
	}
	if r := b.mustRun(t, "parked", "retry", "--key", "cust-2"); r.Stdout != "released 0 "+released {
		t.Errorf("second retry: %q", r.Stdout)
	}
	if n := b.count(t, b.tables.outbox, "id = $1 AND parked_at IS NULL AND attempts = 0", b.cust2); n != 1 {
		t.Errorf("retried row is still parked or kept its attempts")
	}
	if n := b.count(t, b.tables.outbox, "id = $1 AND parked_at IS NOT NULL", b.cust1[0]); n != 1 {
		t.Errorf("retry --key cust-2 released cust-1")
	}
	if r := b.mustRun(t, "parked", "retry", "--all"); r.Stdout != "released 1 "+released {
		t.Errorf("retry --all: %q", r.Stdout)
	}
	if r := b.mustRun(t, "parked", "list"); !strings.HasPrefix(r.Stdout, "no parked keys in outbox") {
		t.Errorf("parked list after retry --all: %q", r.Stdout)
	}
}

func TestRedriveParkedSkip(t *testing.T) {
	t.Parallel()
	b := setupRedrive(t)
	if r := b.run(t, "parked", "skip"); r.Code != command.ExitUsage || !strings.Contains(r.Stderr, "--key is required") {
		t.Errorf("skip without --key: code %d, stderr %q", r.Code, r.Stderr)
	}
	r := b.mustRun(t, "parked", "skip", "--key", "cust-1")
	head := b.cust1[0].String()
	if !strings.Contains(r.Stdout, "skipped message "+head) || !strings.Contains(r.Stdout, "key cust-1") ||
		!strings.Contains(r.Stdout, "the 2 messages waiting behind it go on without it") {
		t.Errorf("skip: stdout %q", r.Stdout)
	}
	for _, want := range []string{"level=WARN", "order is broken on purpose", "key=cust-1", "message_id=" + head} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("skip: stderr %q lacks %q", r.Stderr, want)
		}
	}
	if n := strings.Count(r.Stderr, "\n"); n != 1 {
		t.Errorf("skip: %d lines on stderr, want one warning: %q", n, r.Stderr)
	}
	if n := b.count(t, b.tables.dead, "id = $1 AND reason = 'skipped' AND attempts = 1 AND last_error = 'refused'", b.cust1[0]); n != 1 {
		t.Errorf("skipped head is not a dead letter with reason skipped")
	}
	if n := b.count(t, b.tables.outbox, "ordering_key = 'cust-1' AND parked_at IS NULL"); n != 2 {
		t.Errorf("%d of the key's later rows in the outbox, unparked; want 2", n)
	}
	if n := b.count(t, b.tables.outbox, "id = $1 AND parked_at IS NOT NULL", b.cust2); n != 1 {
		t.Errorf("skip --key cust-1 touched cust-2")
	}

	r = b.mustRun(t, "parked", "skip", "--key", "cust-1")
	if r.Stdout != "key cust-1 has no parked head\n" || r.Stderr != "" {
		t.Errorf("second skip: stdout %q, stderr %q", r.Stdout, r.Stderr)
	}
	d := jsonLines[deadSummary](t, b.mustRun(t, "dead", "list", "--reason", "skipped", "--json").Stdout)
	if len(d) != 1 || d[0].ID != head || d[0].Key != "cust-1" || d[0].Lane == nil || *d[0].Lane != 5 {
		t.Errorf("dead list --reason skipped: %+v", d)
	}
}

func TestRedriveUsageAndHelp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"dead"}, []string{"missing subcommand: want list, show, requeue or purge", "requeue ", "purge "}},
		{[]string{"dead", "frob"}, []string{`unknown subcommand "frob": want list, show, requeue or purge`, "show "}},
		{[]string{"parked"}, []string{"missing subcommand: want list, retry or skip", "retry ", "skip "}},
		{[]string{"parked", "list", "extra"}, []string{`unexpected argument "extra"`}},
		{[]string{"dead", "requeue", "--id", "x"}, []string{"-id", `"x" is not a message id`}},
		{[]string{"dead", "purge", "--older-than", "soon"}, []string{"-older-than", "90m, 48h or 30d"}},
		{[]string{"dead", "purge", "--reason", "old", "--database-url", "postgres://x@127.0.0.1:1/db"}, []string{`--reason "old"`}},
		{[]string{"parked", "retry", "--all", "--key", "k"}, []string{"not both"}},
		{[]string{"parked", "skip", "--key", ""}, []string{"--key is required"}},
	} {
		r := runCmd(t, tc.args...)
		if r.Code != command.ExitUsage {
			t.Errorf("%v: code %d, want %d; stderr %q", tc.args, r.Code, command.ExitUsage, r.Stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(r.Stderr, w) {
				t.Errorf("%v: stderr %q lacks %q", tc.args, r.Stderr, w)
			}
		}
	}
	for _, args := range [][]string{
		{"dead", "-h"}, {"parked", "--help"}, {"dead", "list", "-h"}, {"dead", "show", "-h"}, {"dead", "requeue", "-h"},
		{"dead", "purge", "-h"}, {"parked", "list", "-h"}, {"parked", "retry", "-h"}, {"parked", "skip", "-h"},
	} {
		r := runCmd(t, args...)
		if r.Code != command.ExitOK || !strings.Contains(r.Stderr, "example:\n  relayer "+strings.Join(args[:len(args)-1], " ")) {
			t.Errorf("%v: code %d, stderr:\n%s", args, r.Code, r.Stderr)
		}
	}
	r := runCmd(t, "help")
	for _, want := range []string{"list, show, requeue or purge dead letters", "list parked keys, retry them or skip their head"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("help lacks %q:\n%s", want, r.Stdout)
		}
	}
}

// Keys, types and errors are an outsider's text: the lists print what a
// terminal would act on (a title change, a screen clear, colours) escaped,
// never raw.
func TestListsEscapeTerminalControls(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	t2 := tablesOf(store.Tables{Schema: b.schema, TablePrefix: b.prefix})
	id := uuid.Must(relayer.NewID())
	if _, err := b.db.ExecContext(t.Context(), `INSERT INTO `+t2.dead+` (id, message_type, transport, destination, body, headers, ordering_key, attempts, last_error, reason, created_at)
VALUES ($1, E'ops.\x1b[31mRed', 'nats', 'ops.dead', '\x7b7d', '\x0100000000000000', E'\x1b]0;pwned\x07', 1, E'\x1b[2Jcleared', 'permanent', now())`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.ExecContext(t.Context(), `UPDATE `+t2.outbox+` SET last_error = E'no\u202ereversed\x1b[0m' WHERE id = $1`, b.parked); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"dead", "list"}, {"parked", "list"}, {"stats"}} {
		r := b.run(t, args...)
		if r.Code != command.ExitOK {
			t.Fatalf("%v: code %d, stderr %q", args, r.Code, r.Stderr)
		}
		if strings.ContainsAny(r.Stdout, "\x1b\x07\u202e") {
			t.Errorf("%v prints terminal controls raw: %q", args, r.Stdout)
		}
	}
	r := b.run(t, "dead", "list")
	for _, want := range []string{`\x1b]0;pwned\a`, `ops.\x1b[31mRed`, `\x1b[2Jcleared`} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("dead list lacks the escaped %s:\n%s", want, r.Stdout)
		}
	}
	if r := b.run(t, "parked", "list"); !strings.Contains(r.Stdout, `no\u202ereversed\x1b[0m`) {
		t.Errorf("parked list lacks the escaped error:\n%s", r.Stdout)
	}
}

// migrate --check is a deploy gate: it exits 1 on a fresh schema, listing
// every step pending, and on a schema that does not exist; 0 once
// migrated; 1 again when a newer release recorded a migration this one
// does not know, saying so. It applies nothing.
func TestMigrateCheck(t *testing.T) {
	t.Parallel()
	url, schema := testdb.URL(t), testdb.NewSchema(t)
	flags := []string{"--database-url", url, "--schema", schema}
	steps, err := store.Migrations(store.Tables{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	r := runCmd(t, append([]string{"migrate", "--check"}, flags...)...)
	if r.Code != command.ExitFail || strings.Count(r.Stderr, "\n") != 1 || !strings.Contains(r.Stderr, "relayer migrate --database-url URL --schema "+schema) {
		t.Errorf("--check on a fresh schema: code %d, stderr %q; want %d and how to migrate, on one line", r.Code, r.Stderr, command.ExitFail)
	}
	for _, m := range steps {
		if want := fmt.Sprintf("pending migration %d: %s\n", m.Version, m.Name); !strings.Contains(r.Stdout, want) {
			t.Errorf("--check on a fresh schema: stdout %q lacks %q", r.Stdout, want)
		}
	}
	if r := runCmd(t, append([]string{"migrate", "--check"}, flags...)...); r.Code != command.ExitFail {
		t.Errorf("--check applied something: a second one exits %d", r.Code)
	}
	r = runCmd(t, "migrate", "--check", "--database-url", url, "--schema", schema+"_none")
	if r.Code != command.ExitFail || !strings.Contains(r.Stderr, "schema "+schema+"_none does not exist") {
		t.Errorf("--check on a schema that does not exist: code %d, stderr %q", r.Code, r.Stderr)
	}

	if r := runCmd(t, append([]string{"migrate"}, flags...)...); r.Code != command.ExitOK {
		t.Fatalf("migrate: %q", r.Stderr)
	}
	r = runCmd(t, append([]string{"migrate", "--check"}, flags...)...)
	if want := fmt.Sprintf("is up to date: migration %d", store.SchemaVersion); r.Code != command.ExitOK || !strings.Contains(r.Stdout, want) || r.Stderr != "" {
		t.Errorf("--check after migrate: code %d, stdout %q, stderr %q; want 0 and %q", r.Code, r.Stdout, r.Stderr, want)
	}

	// A pending step of this release: the newest one undone by hand.
	db := testdb.Open(t, "pgx")
	if _, err := db.Exec(`DELETE FROM "`+schema+`".relayer_migrations WHERE version = $1`, store.SchemaVersion); err != nil {
		t.Fatal(err)
	}
	r = runCmd(t, append([]string{"migrate", "--check"}, flags...)...)
	newest := steps[len(steps)-1]
	if want := fmt.Sprintf("pending migration %d: %s\n", newest.Version, newest.Name); r.Code != command.ExitFail || r.Stdout != want || !strings.Contains(r.Stderr, "lacks 1 migration steps") {
		t.Errorf("--check without the newest step: code %d, stdout %q, stderr %q; want %d, %q", r.Code, r.Stdout, r.Stderr, command.ExitFail, want)
	}
	if r := runCmd(t, append([]string{"migrate"}, flags...)...); r.Code != command.ExitOK {
		t.Fatalf("migrate: %q", r.Stderr)
	}

	// The schema is newer than this binary.
	if _, err := db.Exec(`INSERT INTO "`+schema+`".relayer_migrations (version, name) VALUES ($1, 'from a newer release')`, store.SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	r = runCmd(t, append([]string{"migrate", "--check"}, flags...)...)
	if want := fmt.Sprintf("records migration %d, and this release knows migrations up to %d", store.SchemaVersion+1, store.SchemaVersion); r.Code != command.ExitFail || !strings.Contains(r.Stderr, want) {
		t.Errorf("--check on a newer schema: code %d, stderr %q; want %d and %q", r.Code, r.Stderr, command.ExitFail, want)
	}

	if r := runCmd(t, append([]string{"migrate", "--check", "--dry-run"}, flags...)...); r.Code != command.ExitUsage {
		t.Errorf("--check --dry-run: code %d, want %d", r.Code, command.ExitUsage)
	}
}

func TestRanges(t *testing.T) {
	t.Parallel()
	if got := ranges([]int{0, 1, 2, 5, 7, 8}); got != "0-2,5,7-8" {
		t.Errorf("ranges = %q", got)
	}
}
