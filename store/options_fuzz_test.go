package store_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/relayer-go/relayer/internal/storewrite"
	"github.com/relayer-go/relayer/store"
)

// plainIdentifier is the rule Tables.Validate enforces, written out byte by
// byte: empty, or a lowercase letter or underscore followed by lowercase
// letters, digits and underscores, at most max bytes.
func plainIdentifier(s string, max int) bool {
	if s == "" {
		return true
	}
	if len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := c >= 'a' && c <= 'z' || c == '_'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// Validate accepts a schema and table prefix exactly when they are plain
// identifiers (and the schema does not start with pg_), and refuses every
// other one with ErrInvalidOptions: nothing but [a-z0-9_] ever reaches the
// SQL built from them.
func FuzzOptionsValidate(f *testing.F) {
	for _, s := range []string{"", "public", "app_1", "pg_catalog", "Orders", "a-b", `x"; DROP TABLE y; --`, "ümlaut",
		"_", "1abc", strings.Repeat("a", 63), strings.Repeat("a", 64), "a b", "a\x00b"} {
		f.Add(s, "")
		f.Add("public", s)
	}
	f.Fuzz(func(t *testing.T, schema, prefix string) {
		err := store.Tables{Schema: schema, TablePrefix: prefix}.Validate()
		want := plainIdentifier(schema, store.SchemaMaxLen) && !strings.HasPrefix(schema, "pg_") &&
			plainIdentifier(prefix, store.TablePrefixMaxLen)
		switch {
		case want && err != nil:
			t.Fatalf("Validate(%q, %q) = %v, want it accepted", schema, prefix, err)
		case !want && err == nil:
			t.Fatalf("Validate(%q, %q) accepted a name that is not a plain identifier", schema, prefix)
		case err != nil && !errors.Is(err, store.ErrInvalidOptions):
			t.Fatalf("Validate(%q, %q) = %v, want ErrInvalidOptions", schema, prefix, err)
		}
		if _, uerr := storewrite.For(schema, prefix); (uerr == nil) != (err == nil) {
			t.Fatalf("the writers' statements and Validate disagree on (%q, %q): %v, %v", schema, prefix, uerr, err)
		}
	})
}
