package cli

import (
	"context"
	"database/sql"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	"github.com/relayer-go/relayer/store"
)

// Redrive: the dead and parked commands, each a group of subcommands that
// look at the messages that left delivery and put them back, or drop them.
// Every change is one store statement: atomic, idempotent and safe while
// workers run.

// maxLimit bounds --limit of the list subcommands.
const maxLimit = 10000

// group is a command made of subcommands, such as "dead list".
type group struct {
	name     string
	summary  string
	examples []string
	subs     []Command
}

// run runs the subcommand that args name. No subcommand, an unknown one or
// -h prints the group's usage; the first two are usage errors.
func (g group) run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		g.usage(stderr)
		if len(args) == 0 {
			return command.Usagef("missing subcommand: want %s", g.names())
		}
		return flag.ErrHelp
	}
	for _, c := range g.subs {
		if c.Name == args[0] {
			return c.Run(ctx, args[1:], stdout, stderr)
		}
	}
	g.usage(stderr)
	fmt.Fprintln(stderr)
	return command.Usagef("unknown subcommand %q: want %s", args[0], g.names())
}

// usage prints the group's summary, subcommands and examples.
func (g group) usage(w io.Writer) {
	fmt.Fprintf(w, "usage: relayer %s <subcommand> [flags]\n\n%s\n\nsubcommands:\n", g.name, g.summary)
	for _, c := range g.subs {
		fmt.Fprintf(w, "  %-8s %s\n", c.Name, c.Summary)
	}
	fmt.Fprintf(w, "\nexample:\n")
	for _, e := range g.examples {
		fmt.Fprintf(w, "  %s\n", e)
	}
	fmt.Fprintf(w, "\nRun \"relayer %s <subcommand> -h\" for its flags.\n", g.name)
}

// names lists the subcommands for an error message: "a, b or c".
func (g group) names() string {
	var b strings.Builder
	for i, c := range g.subs {
		switch {
		case i == 0:
		case i == len(g.subs)-1:
			b.WriteString(" or ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(c.Name)
	}
	return b.String()
}

// ageFlag is a --older-than flag: a Go duration such as 90m or 48h, or a
// whole number of days such as 30d; never negative.
type ageFlag time.Duration

// String returns the flag's value as a Go duration.
func (a *ageFlag) String() string {
	if a == nil {
		return "0s"
	}
	return time.Duration(*a).String()
}

// Set parses a duration or a number of days.
func (a *ageFlag) Set(s string) error {
	d, err := parseAge(s)
	if err != nil {
		return err
	}
	*a = ageFlag(d)
	return nil
}

// parseAge parses a non-negative Go duration, or a whole number of days
// written with a d suffix.
func parseAge(s string) (time.Duration, error) {
	const bad = "want a duration such as 90m, 48h or 30d"
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 100*365 {
			return 0, fmt.Errorf("%s", bad)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s", bad)
	}
	if d < 0 {
		return 0, fmt.Errorf("must not be negative")
	}
	return d, nil
}

// deadSelection holds the flags that select dead letters.
type deadSelection struct {
	ids                           []uuid.UUID
	typ, destination, key, reason string
	olderThan                     ageFlag
	all                           bool
}

// deadFilterFlags names the filter flags of the dead subcommands, for
// messages that ask for one.
const deadFilterFlags = "--id, --type, --destination, --key, --reason or --older-than"

// register adds the filter flags to fs; withAll adds --all, which the
// subcommands that change dead letters require when no filter is given.
func (s *deadSelection) register(fs *flag.FlagSet, withAll bool) {
	fs.Func("id", "only the dead letter with this `id`; repeat the flag or separate ids with commas for several", s.addIDs)
	fs.StringVar(&s.typ, "type", "", "only messages of this message type")
	fs.StringVar(&s.destination, "destination", "", "only messages to this destination")
	fs.StringVar(&s.key, "key", "", "only messages with this ordering key")
	fs.StringVar(&s.reason, "reason", "", "only dead letters that died for this `reason`: "+strings.Join(store.DeadReasons(), ", "))
	fs.Var(&s.olderThan, "older-than", "only dead letters that died at least this long ago, a `duration` such as 90m, 48h or 30d")
	if withAll {
		fs.BoolVar(&s.all, "all", false, "every dead letter; required when no filter is given")
	}
}

// addIDs parses one --id value: one id or several separated by commas.
func (s *deadSelection) addIDs(v string) error {
	for part := range strings.SplitSeq(v, ",") {
		id, err := uuid.Parse(strings.TrimSpace(part))
		if err != nil {
			return fmt.Errorf("%q is not a message id: %w", part, err)
		}
		s.ids = append(s.ids, id)
	}
	return nil
}

// filter checks the flags and returns the store filter they make.
func (s *deadSelection) filter() (store.DeadFilter, error) {
	if s.reason != "" && !slices.Contains(store.DeadReasons(), s.reason) {
		return store.DeadFilter{}, command.Usagef("--reason %q: want one of %s", s.reason, strings.Join(store.DeadReasons(), ", "))
	}
	return store.DeadFilter{IDs: s.ids, Type: s.typ, Destination: s.destination, Key: s.key,
		Reason: s.reason, OlderThan: time.Duration(s.olderThan)}, nil
}

// selects reports whether any filter narrows the selection.
func (s *deadSelection) selects() bool {
	return len(s.ids) > 0 || s.typ != "" || s.destination != "" || s.key != "" || s.reason != "" || s.olderThan > 0
}

// parkedSelection holds the flags that select parked keys.
type parkedSelection struct {
	typ, destination, key string
	olderThan             ageFlag
	all                   bool
}

// parkedFilterFlags names the filter flags of the parked subcommands.
const parkedFilterFlags = "--key, --type, --destination or --older-than"

// register adds the filter flags to fs; withAll adds --all.
func (s *parkedSelection) register(fs *flag.FlagSet, withAll bool) {
	fs.StringVar(&s.key, "key", "", "only this ordering key")
	fs.StringVar(&s.typ, "type", "", "only keys whose parked head has this message type")
	fs.StringVar(&s.destination, "destination", "", "only keys whose parked head goes to this destination")
	fs.Var(&s.olderThan, "older-than", "only keys parked at least this long ago, a `duration` such as 90m, 48h or 30d")
	if withAll {
		fs.BoolVar(&s.all, "all", false, "every parked key; required when no filter is given")
	}
}

// filter returns the store filter the flags make.
func (s *parkedSelection) filter() store.ParkedFilter {
	return store.ParkedFilter{Type: s.typ, Destination: s.destination, Key: s.key, OlderThan: time.Duration(s.olderThan)}
}

// selects reports whether any filter narrows the selection.
func (s *parkedSelection) selects() bool {
	return s.typ != "" || s.destination != "" || s.key != "" || s.olderThan > 0
}

// checkSelection refuses a change that names neither filters nor --all, so
// that a bare command never touches every row, and one that names both.
func checkSelection(selects, all bool, verb, what, flags string) error {
	switch {
	case !selects && !all:
		return command.Usagef("refusing to %s every %s without --all: select them with %s, or pass --all", verb, what, flags)
	case selects && all:
		return command.Usagef("--all selects every %s: give either --all or filters (%s), not both", what, flags)
	}
	return nil
}

// listing is a list subcommand ("dead list", "parked list") once its flags
// are parsed and checked: what it reads and how it prints it.
type listing[T, S any] struct {
	// what names the rows, such as "dead letters", in the error and the note
	// for an empty list.
	what string
	// filtered says whether filters narrowed the list, to tell an empty
	// selection from an empty outbox.
	filtered bool
	// limit is --limit: read returns that many rows at most, and a list of
	// that many may go on.
	limit  int
	asJSON bool
	read   func(ctx context.Context, st *store.Store, limit int) ([]T, error)
	// summarize returns a row as --json prints it.
	summarize func(T) S
	// header is the table's first line and row prints one line of it, both
	// with tabs between the columns.
	header string
	row    func(w io.Writer, item T)
}

// run opens the outbox, reads the list and prints it: with --json a JSON
// object a line; else a table and a note when the list stopped at the limit,
// or a line saying there is nothing to list.
func (l listing[T, S]) run(ctx context.Context, f *command.OutboxFlags, stdout io.Writer) error {
	opts, db, st, err := f.OpenStore(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	list, err := l.read(ctx, st, l.limit)
	if err != nil {
		return fmt.Errorf("list %s: %w", l.what, err)
	}
	if l.asJSON {
		enc := command.NewJSONEncoder(stdout)
		for _, item := range list {
			if err := enc.Encode(l.summarize(item)); err != nil {
				return err
			}
		}
		return nil
	}
	if len(list) == 0 {
		fmt.Fprintf(stdout, "no %s %sin outbox %s\n", l.what, matching(l.filtered), describe(opts))
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, l.header)
	for _, item := range list {
		l.row(tw, item)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(list) == l.limit {
		fmt.Fprintf(stdout, "(first %d rows; raise --limit for more)\n", l.limit)
	}
	return nil
}

// matching is "matching the filters " when filters narrowed a list that came
// back empty, to tell an empty table from an empty selection.
func matching(filtered bool) string {
	if filtered {
		return "matching the filters "
	}
	return ""
}

// limitFlag adds --limit to a list subcommand's flags.
func limitFlag(fs *flag.FlagSet, what string) *int {
	return fs.Int("limit", 100, fmt.Sprintf("most %s to list, 1 to %d", what, maxLimit))
}

// checkLimit checks a --limit value.
func checkLimit(limit int) error {
	if limit < 1 || limit > maxLimit {
		return command.Usagef("--limit %d: must be 1 to %d", limit, maxLimit)
	}
	return nil
}

// orDash returns s, or "-" when it is empty, for table cells.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printable reports whether b is valid UTF-8 made of printable characters,
// and, when multiline is set, line breaks and tabs: text that is safe to
// print as it is.
func printable(b []byte, multiline bool) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if unicode.IsPrint(r) || multiline && (r == '\n' || r == '\r' || r == '\t') {
			continue
		}
		return false
	}
	return true
}

// asText returns b as text when it is printable, else in base64, and the
// encoding it used: "text" or "base64".
func asText(b []byte, multiline bool) (value, encoding string) {
	if printable(b, multiline) {
		return string(b), "text"
	}
	return base64.StdEncoding.EncodeToString(b), "base64"
}

// changeFlags are the flags of every command that changes rows.
type changeFlags struct{ asJSON, dryRun bool }

func (c *changeFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&c.asJSON, "json", false, "print the outcome as one JSON object: the command, whether it was a dry run, the rows changed (or that would be), the filter and the rows' ids (at most 10,000)")
	fs.BoolVar(&c.dryRun, "dry-run", false, "show what would change, and change nothing")
}

// changeReport is what a change prints with --json.
type changeReport struct {
	Command string         `json:"command"`
	DryRun  bool           `json:"dry_run"`
	Rows    int64          `json:"rows"`
	Filter  map[string]any `json:"filter"`
	IDs     []string       `json:"ids"`
	// IDsTruncated is set when more rows changed than ids are listed.
	IDsTruncated bool `json:"ids_truncated,omitempty"`
}

// change is one run of a command that changes rows: list returns the ids of
// the rows it is about to change (at most maxLimit), apply changes them.
type change struct {
	command string
	filter  map[string]any
	list    func(ctx context.Context, st *store.Store) ([]uuid.UUID, error)
	apply   func(ctx context.Context, st *store.Store) (int64, error)
}

// run lists and applies c in one transaction, which commits unless
// flags.dryRun, and prints the JSON report with flags.asJSON; it returns the
// rows changed (or that would be), for the caller's text.
func (c change) run(ctx context.Context, db *sql.DB, st *store.Store, flags changeFlags, stdout io.Writer) (int64, []uuid.UUID, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, nil, err
	}
	defer tx.Rollback()
	stx, err := st.With(tx)
	if err != nil {
		return 0, nil, err
	}
	ids, err := c.list(ctx, stx)
	if err != nil {
		return 0, nil, err
	}
	n, err := c.apply(ctx, stx)
	if err != nil {
		return 0, nil, err
	}
	if !flags.dryRun {
		if err := tx.Commit(); err != nil {
			return 0, nil, err
		}
	}
	if flags.asJSON {
		r := changeReport{Command: c.command, DryRun: flags.dryRun, Rows: n, Filter: c.filter, IDs: []string{},
			IDsTruncated: int64(len(ids)) < n}
		for _, id := range ids {
			r.IDs = append(r.IDs, id.String())
		}
		if err := command.NewJSONEncoder(stdout).Encode(r); err != nil {
			return 0, nil, err
		}
	}
	return n, ids, nil
}

// wouldBe is the text of a change's outcome: done, or with a dry run what
// would be done.
func wouldBe(dryRun bool, done, verb string) string {
	if dryRun {
		return "would " + verb
	}
	return done
}

// nonZero returns the fields of a filter that select something, for
// --json.
func nonZero(fields map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range fields {
		switch v := v.(type) {
		case string:
			if v == "" {
				continue
			}
		case time.Duration:
			if v == 0 {
				continue
			}
			out[k] = v.String()
			continue
		case []uuid.UUID:
			if len(v) == 0 {
				continue
			}
		}
		out[k] = v
	}
	return out
}
