// Package inbox_test holds the inbox's tests, each run once per
// database/sql driver, pgx's and lib/pq (imported here), in the tests
// module so that the core module does not require lib/pq.
package inbox_test

import _ "github.com/lib/pq" // registers the "postgres" driver
