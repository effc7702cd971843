package store

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/relayer-go/relayer/internal/tables"

	"github.com/relayer-go/relayer"
)

// Identifier limits. PostgreSQL truncates names longer than 63 bytes; the prefix
// limit leaves room for the longest table and index name built from it.
const (
	// SchemaDefault is the schema used when Tables.Schema is empty.
	SchemaDefault = "public"
	// SchemaMaxLen is the longest accepted schema name.
	SchemaMaxLen = 63
	// TablePrefixMaxLen is the longest accepted table prefix.
	TablePrefixMaxLen = 63 - len("outbox_unordered_pending_idx")
)

// Tables names the tables of one outbox. Every writer and worker of an outbox must
// use the same values. The zero value means the "public" schema and no prefix.
type Tables struct {
	// Schema holds the tables. It must match [a-z_][a-z0-9_]* and must not start
	// with "pg_". Default: "public".
	Schema string
	// TablePrefix is put before every table and index name, so that several
	// outboxes can share a schema. It must be empty or match [a-z_][a-z0-9_]* and
	// be at most TablePrefixMaxLen bytes. Default: "".
	TablePrefix string
}

// TablesOf returns the table names of an outbox: its Schema and
// TablePrefix. Build every store, migration, inbox and health check of an
// outbox from the same relayer.Outbox value through it, so that they name
// the same tables as its writers and workers.
func TablesOf(outbox relayer.Outbox) Tables {
	return Tables{Schema: outbox.Schema, TablePrefix: outbox.TablePrefix}
}

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// Validate reports the first invalid field. The rules admit only plain lowercase
// identifiers, so a schema or prefix can never carry SQL of its own.
func (o Tables) Validate() error {
	if err := checkIdentifier("Schema", o.Schema, SchemaMaxLen); err != nil {
		return err
	}
	if strings.HasPrefix(o.Schema, "pg_") {
		return fmt.Errorf("%w: Schema %q: names starting with pg_ are reserved by PostgreSQL", ErrInvalidOptions, o.Schema)
	}
	return checkIdentifier("TablePrefix", o.TablePrefix, TablePrefixMaxLen)
}

// checkIdentifier refuses a value of field (empty is valid: the default) that
// is longer than maxLen or not a plain lowercase identifier.
func checkIdentifier(field, value string, maxLen int) error {
	switch {
	case value == "":
		return nil
	case len(value) > maxLen:
		return fmt.Errorf("%w: %s %q is longer than %d bytes", ErrInvalidOptions, field, value, maxLen)
	case !identifier.MatchString(value):
		return fmt.Errorf("%w: %s %q must match [a-z_][a-z0-9_]*", ErrInvalidOptions, field, value)
	}
	return nil
}

// Label is the outbox's name for people: its outbox table as
// "<schema>.<prefix>outbox", defaults applied, unquoted. Messages, the
// console and the wake-up channel ([Tables.WakeChannel]) name the outbox so.
func (o Tables) Label() string {
	o = o.withDefaults()
	return o.Schema + "." + o.TablePrefix + "outbox"
}

func (o Tables) withDefaults() Tables {
	if o.Schema == "" {
		o.Schema = SchemaDefault
	}
	return o
}

// names are the quoted, schema-qualified names of one outbox's tables. They are
// built only from validated options.
type names = tables.Names

func newNames(o Tables) names { return tables.Of(o.Schema, o.TablePrefix) }
