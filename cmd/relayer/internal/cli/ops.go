package cli

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	"github.com/relayer-go/relayer/internal/vocab"
	"github.com/relayer-go/relayer/store"
)

func runSchema(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f command.OutboxFlags
	fs := command.NewFlagSet("schema", "Prints the DDL of an outbox: one idempotent script, to run in one transaction or feed to a migration tool.",
		"relayer schema --schema messaging --prefix orders_ > outbox.sql", stderr)
	f.Register(fs, false)
	if err := command.Parse(fs, args); err != nil {
		return err
	}
	opts, err := f.Options()
	if err != nil {
		return err
	}
	ddl, err := store.SchemaSQL(opts)
	if err != nil {
		return err
	}
	_, err = io.WriteString(stdout, ddl)
	return err
}

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f command.OutboxFlags
	fs := command.NewFlagSet("migrate", "Creates or upgrades the tables of an outbox, applying the steps it lacks in one transaction. With --dry-run it lists the steps it lacks, with --show-sql it prints their SQL (for a migration tool or a review); neither changes anything. "+
		"With --check, a deploy gate for CI or an init container, it changes nothing and exits 0 when the tables are up to date, 1 when steps are pending (listing them) or when a newer release migrated the tables (saying so).",
		"relayer migrate --database-url postgres://app@db:5432/app --schema messaging --show-sql", stderr)
	f.Register(fs, true)
	dryRun := fs.Bool("dry-run", false, "list the migration steps the outbox lacks, and apply none")
	showSQL := fs.Bool("show-sql", false, "print the SQL of the migration steps the outbox lacks, and apply none")
	check := fs.Bool("check", false, "apply nothing; exit 0 when the outbox is up to date, 1 when steps are pending or its tables are newer than this release")
	opts, db, err := f.Connect(ctx, fs, args)
	if err != nil {
		return err
	}
	defer db.Close()
	if *check {
		if *dryRun || *showSQL {
			return command.Usagef("--check lists what is pending and applies nothing: give it without --dry-run or --show-sql")
		}
		return checkMigrations(ctx, db, opts, stdout)
	}
	if *dryRun || *showSQL {
		return printPendingMigrations(ctx, db, opts, *showSQL, stdout)
	}
	applied, err := store.Migrate(ctx, db, opts)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintf(stdout, "outbox %s is up to date\n", describe(opts))
		return nil
	}
	fmt.Fprintf(stdout, "outbox %s: applied migrations %v\n", describe(opts), applied)
	return nil
}

// printPendingMigrations prints the migration steps the outbox lacks: their
// versions and names, or with sql their SQL, changing nothing.
func printPendingMigrations(ctx context.Context, db *sql.DB, opts store.Tables, sql bool, stdout io.Writer) error {
	st, err := store.New(db, opts)
	if err != nil {
		return err
	}
	newest, err := st.CheckSchema(ctx)
	if err != nil && !errors.Is(err, store.ErrSchemaOutdated) && !errors.Is(err, store.ErrSchemaNewer) {
		return err
	}
	pending, err := migrationsAfter(opts, newest)
	if err != nil {
		return err
	}
	switch {
	case len(pending) == 0:
		fmt.Fprintf(stdout, "outbox %s is up to date: nothing to apply\n", describe(opts))
	case sql:
		for _, m := range pending {
			fmt.Fprintf(stdout, "-- migration %d: %s\n%s\n", m.Version, m.Name, strings.TrimSpace(m.SQL))
		}
	default:
		for _, m := range pending {
			fmt.Fprintf(stdout, "would apply migration %d: %s\n", m.Version, m.Name)
		}
		fmt.Fprintf(stdout, "dry run: outbox %s unchanged\n", describe(opts))
	}
	return nil
}

// migrationsAfter returns the migration steps of this release after
// version newest, in order.
func migrationsAfter(opts store.Tables, newest int) ([]store.Migration, error) {
	steps, err := store.Migrations(opts)
	if err != nil {
		return nil, err
	}
	var after []store.Migration
	for _, m := range steps {
		if m.Version > newest {
			after = append(after, m)
		}
	}
	return after, nil
}

// checkMigrations is migrate --check: nil when the outbox records every
// migration this release knows and no newer one; otherwise it prints the
// steps pending and returns an error that says why the outbox is not
// ready, so that the command exits 1.
func checkMigrations(ctx context.Context, db *sql.DB, opts store.Tables, stdout io.Writer) error {
	st, err := store.New(db, opts)
	if err != nil {
		return err
	}
	newest, cerr := st.CheckSchema(ctx)
	if cerr != nil && !errors.Is(cerr, store.ErrSchemaOutdated) {
		// A newer release migrated the tables, or an object they need
		// was dropped: nothing to apply, and not ready either.
		return fmt.Errorf("--check: %w", cerr)
	}
	pending, err := migrationsAfter(opts, newest)
	if err != nil {
		return err
	}
	for _, m := range pending {
		fmt.Fprintf(stdout, "pending migration %d: %s\n", m.Version, m.Name)
	}
	switch {
	case cerr != nil:
		return fmt.Errorf("--check: %w", cerr)
	case len(pending) > 0:
		return fmt.Errorf("--check: outbox %s lacks %d migration steps of this release: run relayer migrate with the same flags, without --check, to apply them", describe(opts), len(pending))
	}
	fmt.Fprintf(stdout, "outbox %s is up to date: migration %d\n", describe(opts), newest)
	return nil
}

func describe(o store.Tables) string {
	if o.TablePrefix == "" {
		return fmt.Sprintf("in schema %s", o.Schema)
	}
	return fmt.Sprintf("in schema %s with prefix %s", o.Schema, o.TablePrefix)
}

// statsReport is what stats prints; its JSON form is for machines.
type statsReport struct {
	Schema string    `json:"schema"`
	Prefix string    `json:"prefix"`
	At     time.Time `json:"at"`
	// Due counts the rows that may be sent now: Eligible less Blocked.
	// Eligible is the store's count of rows a read could return.
	Due      int64 `json:"due"`
	Eligible int64 `json:"eligible"`
	// Blocked counts, of Eligible, the rows no worker can send yet: the
	// ordered ones whose key is held (a row of the key parked, waiting for
	// its retry or for a paused destination) and the unordered ones for a
	// paused destination; oldest_eligible_age_seconds passes over them.
	Blocked     int64     `json:"blocked"`
	Scheduled   int64     `json:"scheduled"`
	Claimed     int64     `json:"claimed"`
	Retrying    int64     `json:"retrying"`
	NextRetryAt time.Time `json:"next_retry_at,omitzero"`
	Parked      int64     `json:"parked"`
	ParkedKeys  int64     `json:"parked_keys"`
	// OldestParkedAge is how long the longest-parked row has been parked.
	OldestParkedAge float64          `json:"oldest_parked_age_seconds"`
	Dead            int64            `json:"dead"`
	DeadByReason    map[string]int64 `json:"dead_by_reason"`
	OldestAge       float64          `json:"oldest_eligible_age_seconds"`
	// Paused is the destinations workers pass over while their broker is
	// down or slow, as the workers publish them.
	Paused      []store.Pause `json:"paused"`
	Members     []member      `json:"members"`
	Recovery    *holder       `json:"recovery,omitempty"`
	OrphanLanes []int         `json:"orphan_lanes,omitempty"`
}

// member is a live ordered worker and the lanes it holds leases on.
type member struct {
	ID        string    `json:"id"`
	Owner     string    `json:"owner"`
	ExpiresAt time.Time `json:"expires_at"`
	Lanes     []int     `json:"lanes"`
}

// holder is the live holder of a singleton lease such as recovery's.
type holder struct {
	Owner     string    `json:"owner"`
	ExpiresAt time.Time `json:"expires_at"`
}

// readLeases reads the live leases: members with their lanes, the recovery
// holder, and lanes held under a name no live member has
// (store.GroupLanes).
func readLeases(ctx context.Context, db *sql.DB, opts store.Tables) (members []member, recovery *holder, orphans []int, err error) {
	st, err := command.CheckedStore(ctx, db, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	leases, err := st.LiveLeases(ctx)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read leases: %w", err)
	}
	grouped, orphans := store.GroupLanes(leases)
	for _, m := range grouped {
		members = append(members, member{ID: m.Instance, Owner: m.Owner, ExpiresAt: m.ExpiresAt, Lanes: m.Lanes})
	}
	for _, l := range leases {
		if l.Name == store.RecoveryLeaseName {
			recovery = &holder{Owner: l.Owner, ExpiresAt: l.ExpiresAt}
		}
	}
	return members, recovery, orphans, nil
}

func collectStats(ctx context.Context, db *sql.DB, opts store.Tables) (statsReport, error) {
	st, err := command.CheckedStore(ctx, db, opts)
	if err != nil {
		return statsReport{}, err
	}
	now := time.Now().UTC()
	s, err := st.Stats(ctx, now)
	if err != nil {
		return statsReport{}, err
	}
	r := statsReport{
		Schema: st.Tables().Schema, Prefix: opts.TablePrefix, At: now,
		Due: s.Eligible - s.Blocked, Eligible: s.Eligible, Blocked: s.Blocked, Scheduled: s.Scheduled, Claimed: s.Claimed,
		Retrying: s.Retrying, NextRetryAt: s.NextRetryAt,
		Parked: s.Parked, ParkedKeys: s.ParkedKeys, Dead: s.Dead,
	}
	if !s.OldestDueAt.IsZero() {
		r.OldestAge = max(0, now.Sub(s.OldestDueAt).Seconds())
	}
	if !s.OldestParkedAt.IsZero() {
		r.OldestParkedAge = max(0, now.Sub(s.OldestParkedAt).Seconds())
	}
	if r.DeadByReason, err = st.DeadByReason(ctx); err != nil {
		return statsReport{}, err
	}
	if r.Paused, err = st.Pauses(ctx); err != nil {
		return statsReport{}, err
	}
	if r.Paused == nil {
		r.Paused = []store.Pause{}
	}
	r.Members, r.Recovery, r.OrphanLanes, err = readLeases(ctx, db, opts)
	if r.Members == nil {
		r.Members = []member{}
	}
	return r, err
}

func runStats(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f command.OutboxFlags
	fs := command.NewFlagSet("stats", "Shows the backlog (due, blocked, scheduled, being sent, waiting for retry, parked, dead), the longest wait of a due message, parked keys, dead letters by reason, paused destinations, live ordered workers and the lanes they hold, and the recovery lease.",
		"relayer stats --database-url postgres://app@db:5432/app --schema messaging --watch", stderr)
	f.Register(fs, true)
	asJSON := fs.Bool("json", false, "print JSON (one object per refresh with --watch)")
	watch := fs.Bool("watch", false, "refresh every second until Ctrl-C")
	opts, db, err := f.Connect(ctx, fs, args)
	if err != nil {
		return err
	}
	defer db.Close()
	tty := !*asJSON && command.IsTerminal(stdout)
	for {
		r, err := collectStats(ctx, db, opts)
		if err != nil {
			if *watch && ctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := writeStats(stdout, r, *asJSON, *watch && tty); err != nil {
			return err
		}
		if !*watch {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
		if !tty && !*asJSON {
			fmt.Fprintln(stdout)
		}
	}
}

// writeStats writes one report: as a line of JSON, or as text after
// clearing the terminal's screen when clear is set (between refreshes).
func writeStats(w io.Writer, r statsReport, asJSON, clear bool) error {
	if asJSON {
		return command.NewJSONEncoder(w).Encode(r)
	}
	if clear {
		fmt.Fprint(w, "\033[H\033[2J")
	}
	printStats(w, r)
	return nil
}

func printStats(w io.Writer, r statsReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "outbox\t%s\t(%s)\n", describe(store.Tables{Schema: r.Schema, TablePrefix: r.Prefix}), r.At.Format(time.RFC3339))
	blocked := ""
	if r.Blocked > 0 {
		blocked = " (behind parked or retrying keys)"
	}
	fmt.Fprintf(tw, "%s\t%d\n", vocab.Due, r.Due)
	fmt.Fprintf(tw, "%s\t%d%s\n", vocab.Blocked, r.Blocked, blocked)
	fmt.Fprintf(tw, "%s\t%d\n", vocab.Scheduled, r.Scheduled)
	fmt.Fprintf(tw, "%s\t%d\n", vocab.BeingSent, r.Claimed)
	retry := ""
	if r.Retrying > 0 {
		retry = fmt.Sprintf(" (next at %s)", r.NextRetryAt.Format(time.RFC3339))
	}
	fmt.Fprintf(tw, "%s\t%d%s\n", vocab.WaitingForRetry, r.Retrying, retry)
	parked := ""
	if r.Parked > 0 {
		parked = fmt.Sprintf(", oldest parked %s ago", seconds(r.OldestParkedAge))
	}
	fmt.Fprintf(tw, "%s\t%d rows, %d keys%s\n", vocab.Parked, r.Parked, r.ParkedKeys, parked)
	fmt.Fprintf(tw, "%s\t%d%s\n", vocab.Dead, r.Dead, byReason(r.DeadByReason))
	age := "-"
	if r.Due > 0 {
		age = (time.Duration(r.OldestAge * float64(time.Second))).Round(time.Millisecond).String()
	}
	fmt.Fprintf(tw, "%s\t%s\n", vocab.LongestWait, age)
	if len(r.Paused) == 0 {
		fmt.Fprintf(tw, "paused destinations\tnone\n")
	}
	for _, p := range r.Paused {
		fmt.Fprintf(tw, "paused destination\t%s %s by %s, since %s, next probe %s: %s\n", command.OneLine(p.Transport), command.OneLine(p.Destination), command.OneLine(p.Owner),
			p.Since.Format(time.RFC3339), p.NextProbe.Format(time.RFC3339), command.OneLine(p.LastError))
	}
	if r.Recovery != nil {
		fmt.Fprintf(tw, "recovery\t%s (lease until %s)\n", command.OneLine(r.Recovery.Owner), r.Recovery.ExpiresAt.Format(time.RFC3339))
	} else {
		fmt.Fprintf(tw, "recovery\tno live holder\n")
	}
	fmt.Fprintf(tw, "members\t%d\n", len(r.Members))
	tw.Flush()
	printMembers(w, r.Members, r.OrphanLanes)
}

// seconds formats a duration given in seconds, to the second.
func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Second).String()
}

// byReason formats dead-letter counts as " (exhausted 3, permanent 1)".
func byReason(counts map[string]int64) string {
	if len(counts) == 0 {
		return ""
	}
	var parts []string
	for _, reason := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", reason, counts[reason]))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func printMembers(w io.Writer, members []member, orphans []int) {
	if len(members) == 0 && len(orphans) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  MEMBER\tOWNER\tLANES\tCOUNT")
	for _, m := range members {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\n", command.OneLine(m.ID), command.OneLine(m.Owner), ranges(m.Lanes), len(m.Lanes))
	}
	if len(orphans) > 0 {
		fmt.Fprintf(tw, "  (no live member)\t-\t%s\t%d\n", ranges(orphans), len(orphans))
	}
	tw.Flush()
}

// ranges writes sorted lanes compactly: 0-3,7,9-10.
func ranges(lanes []int) string {
	if len(lanes) == 0 {
		return "-"
	}
	var b strings.Builder
	for i := 0; i < len(lanes); {
		j := i
		for j+1 < len(lanes) && lanes[j+1] == lanes[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", lanes[i], lanes[j])
		} else {
			b.WriteString(strconv.Itoa(lanes[i]))
		}
		i = j + 1
	}
	return b.String()
}

func runLanes(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f command.OutboxFlags
	fs := command.NewFlagSet("lanes", "Shows the lane count the outbox records and which live ordered worker holds which lanes, from the lane:N and member:ID leases. "+
		"With --set, changes the recorded lane count: only once the outbox holds no ordered row (parked ones included) and no live ordered worker. "+
		"To change it: stop every writer and worker, let the workers deliver every ordered row and stop, run --set, then start them with the new count (relayer.Outbox.Lanes).",
		"relayer lanes --database-url postgres://app@db:5432/app --schema messaging --set 64", stderr)
	f.Register(fs, true)
	asJSON := fs.Bool("json", false, "print JSON")
	set := fs.Int("set", -1, "record this lane count (1 to 65536) in place of the outbox's, once it is drained")
	opts, db, err := f.Connect(ctx, fs, args)
	if err != nil {
		return err
	}
	defer db.Close()
	st, err := store.New(db, opts)
	if err != nil {
		return err
	}
	if *set != -1 {
		if *set < 1 || *set > 65536 {
			return command.Usagef("--set must be 1 to 65536, got %d", *set)
		}
		if err := st.SetLaneCount(ctx, *set); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "outbox %s: lane count %d recorded; start writers and workers with relayer.Outbox.Lanes = %d\n", describe(opts), *set, *set)
		return nil
	}
	count, recorded, err := st.LaneCount(ctx)
	if err != nil {
		return err
	}
	members, _, orphans, err := readLeases(ctx, db, opts)
	if err != nil {
		return err
	}
	if *asJSON {
		if members == nil {
			members = []member{}
		}
		out := struct {
			Lanes       *int     `json:"lanes"`
			Members     []member `json:"members"`
			OrphanLanes []int    `json:"orphan_lanes,omitempty"`
		}{nil, members, orphans}
		if recorded {
			out.Lanes = &count
		}
		return command.NewJSONEncoder(stdout).Encode(out)
	}
	if len(members) == 0 && len(orphans) == 0 {
		fmt.Fprintf(stdout, "no live ordered workers in outbox %s\n", describe(opts))
	} else {
		printMembers(stdout, members, orphans)
	}
	if recorded {
		fmt.Fprintf(stdout, "lane count: %d\n", count)
	} else {
		fmt.Fprintf(stdout, "lane count: none recorded yet (the first writer or worker to start records its count)\n")
	}
	return nil
}
