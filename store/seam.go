package store

import "github.com/relayer-go/relayer/internal/storewrite"

// The writer statements the library's writers run inside their callers'
// transactions, through internal/storewrite rather than this package's
// stable surface.
func init() {
	storewrite.For = func(schema, prefix string) (storewrite.Statements, error) {
		s, err := unbound(Tables{Schema: schema, TablePrefix: prefix})
		if err != nil {
			return storewrite.Statements{}, err
		}
		return storewrite.Statements{Schema: s.opts.Schema, Insert: s.insertWith, CheckSchema: s.checkSchemaWith, CheckLaneCount: s.checkLaneCountWith}, nil
	}
}
