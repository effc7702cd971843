package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	"github.com/relayer-go/relayer/store"
)

// runDead runs "relayer dead <subcommand>".
func runDead(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return group{
		name: "dead",
		summary: "Dead letters are messages taken out of delivery for good: refused by the broker, out of attempts,\n" +
			"with headers that do not decode, or skipped by an operator. List and show them, requeue them into\n" +
			"the outbox with their ids and content, or purge them.",
		examples: []string{
			"relayer dead list --database-url postgres://app@db:5432/app --schema messaging --reason exhausted",
			"relayer dead requeue --database-url postgres://app@db:5432/app --schema messaging --destination orders",
			"relayer dead purge --database-url postgres://app@db:5432/app --schema messaging --older-than 30d",
		},
		subs: []Command{
			{"list", "list dead letters, newest first, with their reason and last error", runDeadList},
			{"show", "show one dead letter in full: every column, headers and body", runDeadShow},
			{"requeue", "move dead letters back into the outbox, attempts from zero (filters or --all)", runDeadRequeue},
			{"purge", "delete dead letters for good, such as those older than a retention (filters or --all)", runDeadPurge},
		},
	}.run(ctx, args, stdout, stderr)
}

// deadSummary is a dead letter as "dead list --json" prints it.
type deadSummary struct {
	ID          string    `json:"id"`
	Type        string    `json:"type"`
	Transport   string    `json:"transport"`
	Destination string    `json:"destination"`
	Key         string    `json:"key,omitempty"`
	Lane        *int      `json:"lane,omitempty"`
	Attempts    int       `json:"attempts"`
	LastError   string    `json:"last_error,omitempty"`
	Reason      string    `json:"reason"`
	CreatedAt   time.Time `json:"created_at"`
	DeadAt      time.Time `json:"dead_at"`
	// Corrupt is the error decoding the stored headers, for a row whose
	// headers do not decode.
	Corrupt string `json:"corrupt,omitempty"`
}

// deadDetail is a dead letter as "dead show --json" prints it: the summary,
// the remaining columns, the headers and the body.
type deadDetail struct {
	deadSummary
	DeliverAt   *time.Time   `json:"deliver_at,omitempty"`
	TraceParent string       `json:"trace_parent,omitempty"`
	TraceState  string       `json:"trace_state,omitempty"`
	Headers     []headerText `json:"headers"`
	Body        string       `json:"body"`
	// BodyEncoding is "text" when Body is the body itself, "base64" when the
	// body is not UTF-8 text.
	BodyEncoding string `json:"body_encoding"`
}

// headerText is a message header for printing; Encoding is "text" or
// "base64", as for the body.
type headerText struct {
	Name     string `json:"name"`
	Value    string `json:"value"`
	Encoding string `json:"encoding"`
}

// summarize returns the summary of d.
func summarize(d store.DeadLetter) deadSummary {
	s := deadSummary{ID: d.ID.String(), Type: d.Type, Transport: d.Transport, Destination: d.Destination,
		Key: d.Key, Attempts: d.Attempts, LastError: d.LastError, Reason: d.Reason,
		CreatedAt: d.CreatedAt, DeadAt: d.DeadAt}
	if d.Ordered {
		lane := d.Lane
		s.Lane = &lane
	}
	if d.Corrupt != nil {
		s.Corrupt = corruptCause(d.Corrupt)
	}
	return s
}

// detail returns d in full, headers and body as text where they are text.
func detail(d store.DeadLetter) deadDetail {
	out := deadDetail{deadSummary: summarize(d), TraceParent: d.TraceParent, TraceState: d.TraceState}
	if !d.DeliverAt.IsZero() {
		out.DeliverAt = &d.DeliverAt
	}
	for _, h := range d.Headers {
		v, enc := asText(h.Value, false)
		out.Headers = append(out.Headers, headerText{Name: h.Name, Value: v, Encoding: enc})
	}
	if out.Headers == nil && d.Corrupt == nil {
		out.Headers = []headerText{}
	}
	out.Body, out.BodyEncoding = asText(d.Body, true)
	return out
}

// corruptCause returns why a corrupt row's headers do not decode, without
// the row id and column the store's error repeats.
func corruptCause(err error) string {
	var rowErr *store.RowError
	if errors.As(err, &rowErr) && rowErr.Err != nil {
		return command.OneLine(rowErr.Err.Error())
	}
	return command.OneLine(err.Error())
}

// runDeadList runs "relayer dead list".
func runDeadList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f command.OutboxFlags
	var sel deadSelection
	fs := command.NewFlagSet("dead list", "Lists dead letters, newest first: id, type, destination, key, attempts, when and why they died, and the last error. Filters narrow the list.",
		"relayer dead list --database-url postgres://app@db:5432/app --schema messaging --type orders.OrderPlaced --limit 20", stderr)
	f.Register(fs, true)
	sel.register(fs, false)
	asJSON := fs.Bool("json", false, "print JSON, one object per line")
	limit := limitFlag(fs, "dead letters")
	if err := command.Parse(fs, args); err != nil {
		return err
	}
	if err := checkLimit(*limit); err != nil {
		return err
	}
	filter, err := sel.filter()
	if err != nil {
		return err
	}
	return listing[store.DeadLetter, deadSummary]{
		what: "dead letters", filtered: sel.selects(), limit: *limit, asJSON: *asJSON,
		read: func(ctx context.Context, st *store.Store, limit int) ([]store.DeadLetter, error) {
			return st.DeadLetters(ctx, filter, limit)
		},
		summarize: summarize,
		header:    "ID\tTYPE\tDESTINATION\tKEY\tATTEMPTS\tDEAD AT\tREASON\tLAST ERROR",
		row: func(w io.Writer, d store.DeadLetter) {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", d.ID, command.OneLine(d.Type), command.OneLine(d.Destination),
				orDash(command.OneLine(d.Key)), d.Attempts, d.DeadAt.Format(time.RFC3339), d.Reason, orDash(command.OneLine(d.LastError)))
		},
	}.run(ctx, &f, stdout)
}

// runDeadShow runs "relayer dead show ID".
func runDeadShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f command.OutboxFlags
	fs := command.NewFlagSet("dead show ID", "Shows one dead letter in full: every column, the headers (name: value; values that are not printable text in base64) and the body (as text when it is UTF-8, else in base64).",
		"relayer dead show 0190f5a2-7c1e-7d3a-9b1f-3c2d4e5f6a7b --database-url postgres://app@db:5432/app --schema messaging", stderr)
	f.Register(fs, true)
	asJSON := fs.Bool("json", false, "print JSON")
	positional, err := command.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(positional) == 0:
		return command.Usagef("missing the id of the dead letter: relayer dead show ID")
	case len(positional) > 1:
		return command.Usagef("unexpected argument %q: dead show takes one id", positional[1])
	}
	id, err := uuid.Parse(positional[0])
	if err != nil {
		return command.Usagef("%q is not a message id: %v", positional[0], err)
	}
	opts, db, st, err := f.OpenStore(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	list, err := st.DeadLetters(ctx, store.DeadFilter{IDs: []uuid.UUID{id}}, 1)
	if err != nil {
		return fmt.Errorf("read dead letter %s: %w", id, err)
	}
	if len(list) == 0 {
		return fmt.Errorf("no dead letter with id %s in outbox %s", id, describe(opts))
	}
	if *asJSON {
		return command.NewJSONEncoder(stdout).Encode(detail(list[0]))
	}
	return printDeadLetter(stdout, detail(list[0]))
}

// printDeadLetter prints one dead letter in full: a column a line, then the
// headers and the body.
func printDeadLetter(w io.Writer, d deadDetail) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name, value string) { fmt.Fprintf(tw, "%s\t%s\n", name, value) }
	row("id", d.ID)
	row("type", d.Type)
	row("transport", d.Transport)
	row("destination", d.Destination)
	row("key", orDash(d.Key))
	lane := "- (unordered)"
	if d.Lane != nil {
		lane = strconv.Itoa(*d.Lane)
	}
	row("lane", lane)
	row("created at", d.CreatedAt.Format(time.RFC3339Nano))
	deliverAt := "-"
	if d.DeliverAt != nil {
		deliverAt = d.DeliverAt.Format(time.RFC3339Nano)
	}
	row("deliver at", deliverAt)
	row("attempts", strconv.Itoa(d.Attempts))
	row("last error", orDash(command.OneLine(d.LastError)))
	row("reason", d.Reason)
	row("dead at", d.DeadAt.Format(time.RFC3339Nano))
	row("trace parent", orDash(d.TraceParent))
	row("trace state", orDash(d.TraceState))
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case d.Corrupt != "":
		fmt.Fprintf(w, "headers: the stored headers do not decode: %s\n", d.Corrupt)
	case len(d.Headers) == 0:
		fmt.Fprintln(w, "headers: none")
	default:
		fmt.Fprintf(w, "headers (%d):\n", len(d.Headers))
		for _, h := range d.Headers {
			note := ""
			if h.Encoding == "base64" {
				note = " (base64)"
			}
			fmt.Fprintf(w, "  %s: %s%s\n", quoteUnprintable(h.Name), h.Value, note)
		}
	}
	return printBody(w, d.Body, d.BodyEncoding)
}

// quoteUnprintable returns s, quoted when it holds characters that are not
// printable.
func quoteUnprintable(s string) string {
	if printable([]byte(s), false) {
		return s
	}
	return strconv.Quote(s)
}

// printBody prints a body under a line giving its encoding.
func printBody(w io.Writer, body, encoding string) error {
	if body == "" {
		_, err := fmt.Fprintln(w, "body: empty")
		return err
	}
	if encoding == "base64" {
		_, err := fmt.Fprintf(w, "body (base64, not UTF-8 text):\n%s\n", body)
		return err
	}
	n := len(body)
	if body[n-1] != '\n' {
		body += "\n"
	}
	_, err := fmt.Fprintf(w, "body (%d bytes of text):\n%s", n, body)
	return err
}

// runDeadRequeue runs "relayer dead requeue".
func runDeadRequeue(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return changeDead(ctx, args, stdout, stderr, deadChange{
		name: "requeue", verb: "requeue", done: "requeued",
		summary: "Moves the selected dead letters back into the outbox with their ids and content, attempts from zero; an ordered message returns to its key at its place in id order. Requeueing again finds nothing more to do.",
		example: "relayer dead requeue --database-url postgres://app@db:5432/app --schema messaging --reason exhausted --destination orders",
		apply:   (*store.Store).RequeueDead,
	})
}

// runDeadPurge runs "relayer dead purge".
func runDeadPurge(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return changeDead(ctx, args, stdout, stderr, deadChange{
		name: "purge", verb: "purge", done: "purged",
		summary: "Deletes the selected dead letters for good; usually those older than a retention, with --older-than.",
		example: "relayer dead purge --database-url postgres://app@db:5432/app --schema messaging --older-than 30d",
		apply:   (*store.Store).PurgeDead,
	})
}

// deadChange is a subcommand that changes the dead letters a selection
// matches.
type deadChange struct {
	name, verb, done string
	summary, example string
	apply            func(*store.Store, context.Context, store.DeadFilter) (int64, error)
}

// changeDead parses a dead-letter change's flags, refuses a command line
// that selects nothing, applies the change and prints how many rows it
// changed.
func changeDead(ctx context.Context, args []string, stdout, stderr io.Writer, c deadChange) error {
	var f command.OutboxFlags
	var sel deadSelection
	var cf changeFlags
	fs := command.NewFlagSet("dead "+c.name, c.summary, c.example, stderr)
	f.Register(fs, true)
	sel.register(fs, true)
	cf.register(fs)
	if err := command.Parse(fs, args); err != nil {
		return err
	}
	if err := checkSelection(sel.selects(), sel.all, c.verb, "dead letter", deadFilterFlags); err != nil {
		return err
	}
	filter, err := sel.filter()
	if err != nil {
		return err
	}
	_, db, st, err := f.OpenStore(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	n, _, err := change{
		command: "dead " + c.name,
		filter: nonZero(map[string]any{"ids": filter.IDs, "type": filter.Type, "destination": filter.Destination,
			"key": filter.Key, "reason": filter.Reason, "older_than": filter.OlderThan}),
		list: func(ctx context.Context, st *store.Store) ([]uuid.UUID, error) {
			dead, err := st.DeadLetters(ctx, filter, maxLimit)
			ids := make([]uuid.UUID, len(dead))
			for i := range dead {
				ids[i] = dead[i].ID
			}
			return ids, err
		},
		apply: func(ctx context.Context, st *store.Store) (int64, error) { return c.apply(st, ctx, filter) },
	}.run(ctx, db, st, cf, stdout)
	if err != nil {
		return fmt.Errorf("%s dead letters: %w", c.verb, err)
	}
	if !cf.asJSON {
		fmt.Fprintf(stdout, "%s %d dead letters%s\n", wouldBe(cf.dryRun, c.done, c.verb), n, dryNote(cf.dryRun))
	}
	return nil
}

// dryNote ends a dry run's line.
func dryNote(dryRun bool) string {
	if dryRun {
		return " (dry run: nothing changed)"
	}
	return ""
}
