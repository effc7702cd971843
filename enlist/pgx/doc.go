// Package relayerpgx enlists outbox messages in transactions of pgx's native
// interface: a pgx.Tx begun from a *pgxpool.Pool or a *pgx.Conn, and the
// savepoints nested in it.
//
// [Tx] embeds the pgx.Tx, so every pgx method (and every sqlc query built on
// one) keeps its meaning; it adds Publish and PublishAll, and its Commit
// tells the writer's listener about the published rows once the outermost
// commit succeeded:
//
//	w := relayerpgx.NewWriter(writer) // writer is an *enlist.Writer
//	err := w.RunInTx(ctx, pool, pgx.TxOptions{}, func(tx *relayerpgx.Tx) error {
//		if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, id); err != nil {
//			return err
//		}
//		return tx.Publish(ctx, OrderPlaced{ID: id}, relayer.Key(customer))
//	})
//
// The rows are written with the same statement, bytes and columns as through
// database/sql: one multi-row INSERT per publish, one round trip however many
// messages. The dispatchers run on a *sql.DB over the same pool ([OpenDB]).
package relayerpgx
