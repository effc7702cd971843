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
const SchemaVersion = 6

// MinSchemaVersion is the oldest schema this release's writers and workers
// run on: they refuse one that lacks any of the migrations 1 to
// MinSchemaVersion (see [Store.CheckSchema]). The migrations after it, up to
// [SchemaVersion], make them faster but change nothing they rely on, so that
// a release can be deployed before its migration is run.
const MinSchemaVersion = 5

// Schema version errors. Each is wrapped with the outbox's names, both
// versions and what to do; test with [errors.Is].
var (
	// ErrSchemaOutdated is returned when the outbox's tables lack a migration
	// this release needs, or do not record their migrations at all: an
	// upgrade whose migration was not run. Writes would succeed and nothing
	// would be delivered, so writers and workers refuse to start.
	ErrSchemaOutdated = errors.New("store: outbox schema is older than this release")
	// ErrSchemaNewer is returned when the outbox's tables record a migration
	// newer than [SchemaVersion]: a newer release migrated them, as in a
	// rolling deploy. No migration takes away what an older release relies
	// on, so it keeps working; writers and workers warn, or refuse when told
	// to.
	ErrSchemaNewer = errors.New("store: outbox schema is newer than this release")
)

// CheckSchema reads the migrations the outbox's tables record and returns
// the newest. It returns an error wrapping [ErrSchemaOutdated] when one of
// the versions 1 to [MinSchemaVersion] is missing (or no migration is recorded:
// the tables do not exist, or a tool created them without recording the
// steps), and the version with an error wrapping [ErrSchemaNewer] when a
// newer one is recorded. Either error says how to migrate. It runs one
// statement when the migrations table exists, two otherwise.
func (s *Store) CheckSchema(ctx context.Context) (int, error) {
	var exists bool
	if err := s.queryRow(ctx, "check schema", s.vq.exists, []any{&exists}); err != nil {
		return 0, err
	}
	if !exists {
		return 0, s.outdated(0, 0)
	}
	var newest, present int
	if err := s.queryRow(ctx, "check schema", s.vq.versions, []any{&newest, &present}); err != nil {
		return 0, err
	}
	switch {
	case present < MinSchemaVersion:
		return newest, s.outdated(newest, present)
	case newest > SchemaVersion:
		return newest, s.newer(newest)
	}
	return newest, nil
}

// CheckSchemaWith is [Store.CheckSchema] for writers that can only execute
// statements (see [ExecFunc]), such as inside a caller's transaction of any
// driver: one statement that fails, and so reports, an outdated schema
// (wrapping [ErrSchemaOutdated]); a newer schema fails it (wrapping
// [ErrSchemaNewer]) only when refuseNewer is set, and passes unreported
// otherwise. A failed check aborts the transaction it ran in.
func (s *Store) CheckSchemaWith(ctx context.Context, exec ExecFunc, refuseNewer bool) error {
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
	case strings.Contains(msg, markOutdated):
		fmt.Sscanf(msg[strings.Index(msg, markOutdated)+len(markOutdated):], " %d %d", &newest, &present)
		return s.outdated(newest, present)
	case strings.Contains(msg, markNewer):
		fmt.Sscanf(msg[strings.Index(msg, markNewer)+len(markNewer):], " %d", &newest)
		return s.newer(newest)
	}
	return wrap(ctx, "check schema", err)
}

// The markers the check statement raises, followed by the versions found.
const (
	markOutdated = "relayer: outdated outbox schema:"
	markNewer    = "relayer: newer outbox schema:"
)

// newer is the error of a schema a newer release migrated.
func (s *Store) newer(newest int) error {
	return fmt.Errorf("%w: %s records migration %d, and this release knows migrations up to %d; "+
		"a newer release migrated it (a rolling deploy?): this one keeps working, since no migration takes away what it relies on, until it is upgraded",
		ErrSchemaNewer, s.label(), newest, SchemaVersion)
}

// outdated is the error of a schema missing migrations.
func (s *Store) outdated(newest, present int) error {
	have := "records no migration"
	if newest > 0 {
		have = fmt.Sprintf("records %d of the migrations 1 to %d this release needs", present, MinSchemaVersion)
	}
	cmd := "relayer migrate --database-url URL"
	if s.opts.Schema != "public" {
		cmd += " --schema " + s.opts.Schema
	}
	if s.opts.TablePrefix != "" {
		cmd += " --prefix " + s.opts.TablePrefix
	}
	return fmt.Errorf("%w: %s %s: run `%s` or store.Migrate (both apply only the missing steps, "+
		"and are safe while older writers and workers run), or feed store.SchemaSQL to your migration tool",
		ErrSchemaOutdated, s.label(), have, cmd)
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
}

func buildVersionQueries(n names) *versionQueries {
	// The table's name as to_regclass reads it: quoted parts, as n has them.
	regclass := strings.ReplaceAll(n.Migrations, `'`, `''`)
	versions := `SELECT coalesce(max(version), 0), count(*) FILTER (WHERE version BETWEEN 1 AND ` + strconv.Itoa(MinSchemaVersion) + `)
FROM ` + n.Migrations
	// check raises an exception naming the versions found when the schema
	// is outdated (and, strictly, when it is newer): the only answer a
	// statement run through an ExecFunc gives is whether it failed.
	check := func(strict bool) string {
		newer := ""
		if strict {
			newer = `
    IF newest > ` + strconv.Itoa(SchemaVersion) + ` THEN
        RAISE EXCEPTION '` + markNewer + ` % %', newest, present;
    END IF;`
		}
		return `DO $relayer$
DECLARE newest integer := 0; present integer := 0;
BEGIN
    IF to_regclass('` + regclass + `') IS NOT NULL THEN
        EXECUTE '` + strings.ReplaceAll(versions, `'`, `''`) + `' INTO newest, present;
    END IF;
    IF present < ` + strconv.Itoa(MinSchemaVersion) + ` THEN
        RAISE EXCEPTION '` + markOutdated + ` % %', newest, present;
    END IF;` + newer + `
END
$relayer$`
	}
	return &versionQueries{
		exists:      `SELECT to_regclass('` + regclass + `') IS NOT NULL`,
		versions:    versions,
		check:       check(false),
		checkStrict: check(true),
	}
}
