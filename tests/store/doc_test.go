// Package store_test holds the store's conformance tests: each runs once per
// database/sql driver, pgx's and lib/pq, which this package imports. They
// live in the tests module so that the core module, which users require,
// does not require lib/pq.
package store_test

import _ "github.com/lib/pq" // registers the "postgres" driver
