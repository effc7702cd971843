package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
)

// The held commands list the keys consumers hold, retry them and skip
// their first message, as the consumers' drains then carry out.
func TestHeldCommands(t *testing.T) {
	t.Parallel()
	b := &opsBundle{url: testdb.URL(t), schema: testdb.NewSchema(t), prefix: "hk_"}
	b.mustRun(t, "migrate")
	b.db = testdb.Open(t, "pgx")
	held := pgx.Identifier{b.schema, b.prefix + "inbox_held"}.Sanitize()
	waiting := pgx.Identifier{b.schema, b.prefix + "inbox_waiting"}.Sanitize()
	first, second := uuid.Must(relayer.NewID()), uuid.Must(relayer.NewID())
	// As a consumer leaves them: billing holds customer-7, whose first
	// message failed twice, with one more behind it.
	b.exec(t, `INSERT INTO `+held+` (consumer, ordering_key, attempts, retry_at, last_error)
VALUES ('billing', 'customer-7', 2, now() + interval '1 hour', 'ledger down')`)
	for _, id := range []uuid.UUID{first, second} {
		b.exec(t, `INSERT INTO `+waiting+` (consumer, ordering_key, message_id, message_type, destination, headers, body)
VALUES ('billing', 'customer-7', $1, 'orders.Placed', 'orders.placed', '\x0100000000000000', '\x7b7d')`, id)
	}

	r := b.mustRun(t, "held", "list", "--json")
	var got heldSummary
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &got); err != nil {
		t.Fatalf("held list --json printed %q: %v", r.Stdout, err)
	}
	if got.Consumer != "billing" || got.Key != "customer-7" || got.HeadID != first.String() || got.Attempts != 2 ||
		got.Waiting != 2 || got.LastError != "ledger down" || got.Type != "orders.Placed" {
		t.Errorf("held list --json = %+v; want billing's customer-7, its first message failed twice, two waiting", got)
	}
	r = b.mustRun(t, "held", "list")
	if !strings.Contains(r.Stdout, "customer-7") || !strings.Contains(r.Stdout, "ledger down") {
		t.Errorf("held list printed %q", r.Stdout)
	}
	if r := b.run(t, "held", "retry"); r.Code != command.ExitUsage {
		t.Errorf("held retry without a selection: code %d, want %d", r.Code, command.ExitUsage)
	}
	r = b.mustRun(t, "held", "retry", "--consumer", "billing")
	if !strings.Contains(r.Stdout, "retried 1 held keys") || b.count(t, held, "attempts = 0 AND retry_at <= now()") != 1 {
		t.Errorf("held retry printed %q; want the key due at once, attempts from zero", r.Stdout)
	}
	if r := b.run(t, "held", "skip", "--consumer", "billing"); r.Code != command.ExitUsage {
		t.Errorf("held skip without --key: code %d, want %d", r.Code, command.ExitUsage)
	}
	r = b.mustRun(t, "held", "skip", "--consumer", "billing", "--key", "customer-7")
	if !strings.Contains(r.Stdout, "skipping message "+first.String()) || !strings.Contains(r.Stderr, "order is broken on purpose") ||
		b.count(t, held, "skip_message = $1", first) != 1 {
		t.Errorf("held skip printed %q, %q; want the first message marked for the dead letters, with a warning", r.Stdout, r.Stderr)
	}
	r = b.mustRun(t, "held", "skip", "--consumer", "billing", "--key", "customer-8")
	if !strings.Contains(r.Stdout, "holds no key customer-8") {
		t.Errorf("held skip of a key not held printed %q", r.Stdout)
	}
}
