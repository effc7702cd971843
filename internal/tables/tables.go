// Package tables names the tables and indexes of one outbox: the one place
// that turns a schema and a table prefix into the quoted, qualified names
// every statement uses. Package store builds its statements from it, and
// the project's own tools (internal/tool/outboxtool) theirs.
package tables

// Names are the quoted, schema-qualified names of one outbox's tables.
type Names struct {
	Schema string // quoted schema
	Outbox string // qualified, quoted tables
	Dead   string
	Leases string
	Pauses string
	Inbox  string
	// InboxHeld and InboxWaiting hold consumers' held keys and the
	// messages waiting behind them (package consume).
	InboxHeld    string
	InboxWaiting string
	Migrations   string
	Settings     string
	Activity     string
	prefix       string // raw prefix, for index names
}

// Of returns the names of the outbox tables in schema whose names start with
// prefix. Both must have been validated as plain lowercase identifiers
// (store.Tables.Validate): they are quoted, not escaped.
func Of(schema, prefix string) Names {
	q := func(s string) string { return `"` + s + `"` }
	t := func(name string) string { return q(schema) + "." + q(prefix+name) }
	return Names{
		Schema:       q(schema),
		Outbox:       t("outbox"),
		Dead:         t("dead"),
		Leases:       t("relayer_leases"),
		Pauses:       t("relayer_pauses"),
		Inbox:        t("inbox"),
		InboxHeld:    t("inbox_held"),
		InboxWaiting: t("inbox_waiting"),
		Migrations:   t("relayer_migrations"),
		Settings:     t("relayer_settings"),
		Activity:     t("relayer_activity"),
		prefix:       prefix,
	}
}

// Index returns the quoted name of an index; PostgreSQL puts indexes in
// their table's schema, so the name is not qualified.
func (n Names) Index(name string) string { return `"` + n.prefix + name + `"` }

// Constraint returns the quoted name of a constraint of one of the tables,
// such as the name PostgreSQL gave a check it named after its table
// (name "outbox_lane_check"); it is not qualified.
func (n Names) Constraint(name string) string { return n.Index(name) }
