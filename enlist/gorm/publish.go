package relayergorm

import (
	"fmt"

	"gorm.io/gorm"

	"github.com/relayer-go/relayer"
)

// Publish writes one message in the transaction tx runs in, in one round trip,
// and hands it to the writer's listener after the outermost commit. tx is the
// *gorm.DB of db.Transaction's callback or of db.Begin; its Statement.Context
// bounds the write. Outside a transaction begun through the plugin it returns
// an error wrapping [relayer.ErrNotInTransaction] and writes nothing; an
// invalid message is refused with [relayer.ErrInvalidMessage].
func Publish(tx *gorm.DB, msg any, opts ...relayer.Option) error {
	return PublishAll(tx, relayer.NewOutgoing(msg, opts...))
}

// PublishAll writes several messages in the transaction tx runs in, in one
// round trip; see [Publish]. Every message is validated first: if one is
// invalid, none is written.
func PublishAll(tx *gorm.DB, msgs ...relayer.Outgoing) error {
	t, err := transactionOf(tx)
	if err != nil {
		return err
	}
	return t.publish(tx.Statement.Context, msgs)
}

// transactionOf returns the plugin's transaction tx runs in, or an error
// wrapping relayer.ErrNotInTransaction that says how to get one.
func transactionOf(tx *gorm.DB) (*txConn, error) {
	if tx == nil || tx.Statement == nil {
		return nil, fmt.Errorf("%w: nil *gorm.DB", relayer.ErrNotInTransaction)
	}
	if t := findTx(tx.Statement.ConnPool); t != nil {
		return t, nil
	}
	return nil, notInTransaction(tx)
}

// findTx unwraps the PreparedStmtTX layers PrepareStmt puts around a
// transaction (a Session with PrepareStmt on a prepared *gorm.DB adds a second).
func findTx(conn gorm.ConnPool) *txConn {
	for {
		switch c := conn.(type) {
		case *txConn:
			return c
		case *gorm.PreparedStmtTX:
			conn = c.Tx
		default:
			return nil
		}
	}
}

// notInTransaction explains why db's statement is not in a plugin transaction.
func notInTransaction(db *gorm.DB) error {
	if db.Config == nil {
		return fmt.Errorf("%w: the *gorm.DB was not opened with gorm.Open", relayer.ErrNotInTransaction)
	}
	if _, installed := db.Plugins[pluginName]; !installed {
		return fmt.Errorf("%w: the relayergorm plugin is not installed on this *gorm.DB; call db.Use(relayergorm.Plugin(writer)) right after gorm.Open",
			relayer.ErrNotInTransaction)
	}
	if _, ok := db.Statement.ConnPool.(gorm.TxCommitter); ok {
		return fmt.Errorf("%w: the statement runs in a transaction the relayergorm plugin did not begin "+
			"(was it begun in db.Connection, or on a session derived before db.Use?); begin it with db.Transaction or db.Begin on the *gorm.DB the plugin is installed on",
			relayer.ErrNotInTransaction)
	}
	// SkipDefaultTransaction is named only when set: it is why a lone Create,
	// Update or Delete runs without a transaction, but Publish on the
	// *gorm.DB itself is outside one whatever the setting.
	const fix = "run it inside db.Transaction(func(tx *gorm.DB) error { ... }) on the callback's tx, or between tx := db.Begin() and tx.Commit()"
	if db.SkipDefaultTransaction {
		return fmt.Errorf("%w: the statement does not run in a transaction (SkipDefaultTransaction is set, so GORM does not open one); "+fix,
			relayer.ErrNotInTransaction)
	}
	return fmt.Errorf("%w: the *gorm.DB is not in a transaction; "+fix, relayer.ErrNotInTransaction)
}
