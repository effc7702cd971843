package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// SchemaVersion is the newest migration this release knows: the one
// [Migrate] brings an outbox to.
const SchemaVersion = 9

// MinSchemaVersion is the oldest schema this release's writers and workers
// run on: they refuse one that lacks any of the migrations 1 to
// MinSchemaVersion (see [Store.CheckSchema]). The migrations after it, up to
// [SchemaVersion], add what writers and workers can run without (each
// [Migration]'s Name says what, such as the record of deliveries that
// consoles read), so that a release can be deployed before its migration is
// run.
const MinSchemaVersion = 5

// Schema version errors. Each is wrapped with the outbox's names, both
// versions and what to do; test with [errors.Is].
var (
	// ErrSchemaOutdated is returned when the outbox's tables lack a migration
	// this release needs, or do not record their migrations at all: an
	// upgrade whose migration was not run. Writes would succeed and nothing
	// would be delivered, so writers and workers refuse to start. It is also
	// wrapped, with a message that says so, when the outbox's schema does
	// not exist.
	ErrSchemaOutdated = errors.New("store: outbox schema is older than this release")
	// ErrSchemaNewer is returned when the outbox's tables record a migration
	// newer than [SchemaVersion]: a newer release migrated them, as in a
	// rolling deploy. No migration takes away what an older release relies
	// on, so it keeps working; writers and workers warn, or refuse when told
	// to.
	ErrSchemaNewer = errors.New("store: outbox schema is newer than this release")
	// ErrSchemaIncomplete is returned when the outbox's tables record the
	// migrations this release needs but lack an object those migrations
	// made and writers or workers rely on: the default that stamps each
	// row with its transaction (xact_id), or an index of the lanes (pending
	// rows, held keys, rows by transaction). Someone dropped it by hand, or a
	// tool recorded a step without running all of it. Rows written without
	// the stamp could be missed by ordered reads, so writers and workers
	// refuse to start; the error names what is missing.
	ErrSchemaIncomplete = errors.New("store: outbox schema lacks objects its recorded migrations make")
)

// CheckSchema reads the migrations the outbox's tables record and returns
// the newest. It returns an error wrapping [ErrSchemaOutdated] when one of
// the versions 1 to [MinSchemaVersion] is missing (or no migration is recorded:
// the tables do not exist, or a tool created them without recording the
// steps), and the version with an error wrapping [ErrSchemaNewer] when a
// newer one is recorded. Either error says how to migrate. When the
// outbox's schema does not exist, the error still wraps
// [ErrSchemaOutdated], but says that the schema does not exist. It runs one
// statement when the migrations table exists, two otherwise.
func (s *Store) CheckSchema(ctx context.Context) (int, error) {
	var exists, schemaExists bool
	if err := s.queryRow(ctx, "check schema", s.vq.exists, []any{&exists, &schemaExists}); err != nil {
		return 0, err
	}
	switch {
	case !schemaExists:
		return 0, s.missingSchema()
	case !exists:
		return 0, s.outdated(0, 0)
	}
	var newest, present int
	if err := s.queryRow(ctx, "check schema", s.vq.versions, []any{&newest, &present}); err != nil {
		return 0, err
	}
	if present < MinSchemaVersion {
		return newest, s.outdated(newest, present)
	}
	var missing string
	if err := s.queryRow(ctx, "check schema", s.vq.objects, []any{&missing}); err != nil {
		return newest, err
	}
	if missing != "" {
		return newest, s.incomplete(missing)
	}
	if newest > SchemaVersion {
		return newest, s.newer(newest)
	}
	return newest, nil
}

// checkSchemaWith is [Store.CheckSchema] for writers that can only execute
// statements, such as inside a caller's transaction of any
// driver: one statement that fails, and so reports, an outdated schema
// (wrapping [ErrSchemaOutdated]); a newer schema fails it (wrapping
// [ErrSchemaNewer]) only when refuseNewer is set, and passes unreported
// otherwise. A failed check aborts the transaction it ran in.
func (s *Store) checkSchemaWith(ctx context.Context, exec execFunc, refuseNewer bool) error {
	q := s.vq.check
	if refuseNewer {
		q = s.vq.checkStrict
	}
	err := exec(ctx, q)
	if err == nil {
		return nil
	}
	msg := err.Error()
	var newest, present int
	switch {
	case strings.Contains(msg, markMissing):
		return s.missingSchema()
	case strings.Contains(msg, markOutdated):
		fmt.Sscanf(msg[strings.Index(msg, markOutdated)+len(markOutdated):], " %d %d", &newest, &present)
		return s.outdated(newest, present)
	case strings.Contains(msg, markIncomplete):
		missing := msg[strings.Index(msg, markIncomplete)+len(markIncomplete):]
		if i := strings.Index(missing, " (SQLSTATE"); i >= 0 {
			missing = missing[:i]
		}
		return s.incomplete(strings.TrimSpace(missing))
	case strings.Contains(msg, markNewer):
		fmt.Sscanf(msg[strings.Index(msg, markNewer)+len(markNewer):], " %d", &newest)
		return s.newer(newest)
	}
	return wrap(ctx, "check schema", err)
}

// The markers the check statement raises, followed by the versions found.
const (
	markMissing  = "relayer: missing outbox schema"
	markOutdated = "relayer: outdated outbox schema:"
	markNewer    = "relayer: newer outbox schema:"
	// markIncomplete is followed by the objects missing, then a period.
	markIncomplete = "relayer: incomplete outbox schema, missing:"
)

// incomplete is the error of a schema that lacks objects its migrations
// make; missing names them.
func (s *Store) incomplete(missing string) error {
	cmd := s.command("relayer schema")
	return fmt.Errorf("%w: %s records its migrations but lacks %s; the script `%s` prints (store.SchemaSQL) "+
		"is idempotent and makes what is missing: run it with psql or your migration tool",
		ErrSchemaIncomplete, s.label(), strings.TrimSuffix(missing, "."), cmd)
}

// newer is the error of a schema a newer release migrated.
func (s *Store) newer(newest int) error {
	return fmt.Errorf("%w: %s records migration %d, and this release knows migrations up to %d; "+
		"a newer release migrated it (a rolling deploy?): this one keeps working, since no migration takes away what it relies on, until it is upgraded",
		ErrSchemaNewer, s.label(), newest, SchemaVersion)
}

// schemaMissingError is the error of an outbox whose PostgreSQL schema
// does not exist. It wraps [ErrSchemaOutdated], whose remedy it shares (a
// migration makes the schema and the tables), but says what is wrong
// instead of calling a schema that is not there older than the release.
type schemaMissingError struct{ msg string }

func (e *schemaMissingError) Error() string { return e.msg }
func (e *schemaMissingError) Unwrap() error { return ErrSchemaOutdated }

// missingSchema is the error of an outbox whose schema does not exist.
func (s *Store) missingSchema() error {
	return &schemaMissingError{fmt.Sprintf("store: schema %s does not exist; run `%s` or store.Migrate, which create it and the outbox's tables",
		s.opts.Schema, s.command("relayer migrate --database-url URL"))}
}

// outdated is the error of a schema missing migrations.
func (s *Store) outdated(newest, present int) error {
	have := "records no migration"
	if newest > 0 {
		have = fmt.Sprintf("records %d of the migrations 1 to %d this release needs", present, MinSchemaVersion)
	}
	cmd := s.command("relayer migrate --database-url URL")
	return fmt.Errorf("%w: %s %s: run `%s` or store.Migrate (both apply only the missing steps, "+
		"and are safe while older writers and workers run), or feed store.SchemaSQL to your migration tool",
		ErrSchemaOutdated, s.label(), have, cmd)
}

// command returns the relayer command line cmd with the outbox's schema
// and prefix flags, for messages.
func (s *Store) command(cmd string) string {
	if s.opts.Schema != "public" {
		cmd += " --schema " + s.opts.Schema
	}
	if s.opts.TablePrefix != "" {
		cmd += " --prefix " + s.opts.TablePrefix
	}
	return cmd
}

// label names the outbox's tables for messages.
func (s *Store) label() string {
	return "the outbox " + s.opts.Label()
}

// queryRow runs a one-row query and scans it into dest.
func (s *Store) queryRow(ctx context.Context, op, query string, dest []any, args ...any) error {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return wrap(ctx, op, err)
	}
	defer rows.Close()
	if !rows.Next() {
		return wrap(ctx, op, errors.Join(rows.Err(), errors.New("no row")))
	}
	if err := rows.Scan(dest...); err != nil {
		return wrap(ctx, op, err)
	}
	return wrap(ctx, op, rows.Close())
}

// versionQueries are the statements of CheckSchema.
type versionQueries struct {
	exists, versions   string
	check, checkStrict string
	// objects returns the objects missing that writers and workers rely
	// on, as a list for people ("" when none is).
	objects string
}

func buildVersionQueries(n names) *versionQueries {
	// The table's name as to_regclass reads it: quoted parts, as n has them.
	regclass := strings.ReplaceAll(n.Migrations, `'`, `''`)
	namespace := strings.ReplaceAll(n.Schema, `'`, `''`)
	versions := `SELECT coalesce(max(version), 0), count(*) FILTER (WHERE version BETWEEN 1 AND ` + strconv.Itoa(MinSchemaVersion) + `)
FROM ` + n.Migrations
	// The objects the migrations make that writers and workers rely on:
	// the xact_id default (migration 4) and the lane indexes (1, 2 and 4).
	// Checked through the catalogs, so that an object dropped by hand is
	// seen whatever the migration records say.
	outbox := strings.ReplaceAll(n.Outbox, `'`, `''`)
	var checks []string
	for _, idx := range []string{"outbox_lane_pending_idx", "outbox_held_keys_idx", "outbox_lane_xact_idx"} {
		checks = append(checks, `CASE WHEN to_regclass('`+strings.ReplaceAll(n.Schema+"."+n.Index(idx), `'`, `''`)+`') IS NULL THEN 'the index `+strings.Trim(n.Index(idx), `"`)+`' END`)
	}
	checks = append(checks, `CASE WHEN to_regclass('`+outbox+`') IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_attrdef AS d
        JOIN pg_attribute AS a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
        WHERE d.adrelid = to_regclass('`+outbox+`') AND a.attname = 'xact_id'
          AND pg_get_expr(d.adbin, d.adrelid) = 'pg_current_xact_id()')
    THEN 'the default of xact_id (pg_current_xact_id())' END`)
	objects := `SELECT coalesce(concat_ws(', ', ` + strings.Join(checks, ",\n    ") + `), '')`
	// check raises an exception naming the versions found when the schema
	// is outdated (and, strictly, when it is newer): the only answer a
	// statement run through an execFunc gives is whether it failed.
	check := func(strict bool) string {
		newer := ""
		if strict {
			newer = `
    IF newest > ` + strconv.Itoa(SchemaVersion) + ` THEN
        RAISE EXCEPTION '` + markNewer + ` % %', newest, present;
    END IF;`
		}
		return `DO $relayer$
DECLARE newest integer := 0; present integer := 0; missing text;
BEGIN
    IF to_regnamespace('` + namespace + `') IS NULL THEN
        RAISE EXCEPTION '` + markMissing + `';
    END IF;
    IF to_regclass('` + regclass + `') IS NOT NULL THEN
        EXECUTE '` + strings.ReplaceAll(versions, `'`, `''`) + `' INTO newest, present;
    END IF;
    IF present < ` + strconv.Itoa(MinSchemaVersion) + ` THEN
        RAISE EXCEPTION '` + markOutdated + ` % %', newest, present;
    END IF;
    EXECUTE '` + strings.ReplaceAll(objects, `'`, `''`) + `' INTO missing;
    IF missing <> '' THEN
        RAISE EXCEPTION '` + markIncomplete + ` %.', missing;
    END IF;` + newer + `
END
$relayer$`
	}
	return &versionQueries{
		exists:      `SELECT to_regclass('` + regclass + `') IS NOT NULL, to_regnamespace('` + namespace + `') IS NOT NULL`,
		versions:    versions,
		check:       check(false),
		checkStrict: check(true),
		objects:     objects,
	}
}
