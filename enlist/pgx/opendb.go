package relayerpgx

import (
	"database/sql"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// OpenDB returns a *sql.DB over pool, for the dispatchers and the store:
// its connections are the pool's, and it is bounded like the pool
// (MaxOpenConns is the pool's MaxConns), so that dispatch.Runner.Start
// refuses a pool without room for its workers and the application. It keeps
// no idle connections of its own: each goes back to the pool when a
// statement is done. Closing the *sql.DB does not close the pool.
func OpenDB(pool *pgxpool.Pool) *sql.DB {
	db := stdlib.OpenDBFromPool(pool)
	n := int(pool.Config().MaxConns)
	db.SetMaxOpenConns(n)
	return db
}
