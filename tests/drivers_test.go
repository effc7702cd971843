package tests

// The tests of this package that run per database/sql driver run on lib/pq
// as well as pgx.
import _ "github.com/lib/pq" // registers the "postgres" driver
