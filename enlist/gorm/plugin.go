package relayergorm

import (
	"errors"
	"reflect"

	"gorm.io/gorm"

	"github.com/relayer-go/relayer/enlist"
)

// pluginName is the name the plugin is registered under in gorm.Config.Plugins.
const pluginName = "relayergorm"

// Names of the callbacks the plugin registers on Create, Update and Delete,
// and on raw statements.
const (
	checkCallback     = "relayergorm:check_transaction"
	enlistCallback    = "relayergorm:enlist_messages"
	savepointCallback = "relayergorm:track_savepoints"
)

type plugin struct {
	w *enlist.Writer
}

// Plugin returns the GORM plugin that makes the transactions of a *gorm.DB
// publish through w. Install it once, right after gorm.Open and before the
// *gorm.DB is used or derived from (sessions made earlier keep the unwrapped
// connection pool):
//
//	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), &gorm.Config{})
//	...
//	if err := db.Use(relayergorm.Plugin(writer)); err != nil { ... }
//
// Installing fails when w is nil, when the connection pool cannot begin
// transactions, and when the plugin is already installed.
func Plugin(w *enlist.Writer) gorm.Plugin { return plugin{w: w} }

// Name implements gorm.Plugin.
func (plugin) Name() string { return pluginName }

// Initialize implements gorm.Plugin: it wraps the connection pool and registers
// the callbacks that enlist the pending messages of models.
func (p plugin) Initialize(db *gorm.DB) error {
	if p.w == nil {
		return errors.New("relayergorm: Plugin: nil *enlist.Writer")
	}
	if err := installPool(db, p.w); err != nil {
		return err
	}
	return registerCallbacks(db)
}

// installPool puts a connPool under db. With PrepareStmt, db.ConnPool is a
// *gorm.PreparedStmtDB that GORM also keeps in its cache and looks for by type
// (the postgres migrator resets its statements); the wrapper goes inside it, so
// that the PreparedStmtTX it begins holds a txConn and its Commit reaches ours.
func installPool(db *gorm.DB, w *enlist.Writer) error {
	if prepared, ok := db.ConnPool.(*gorm.PreparedStmtDB); ok {
		wrapped, err := wrapPool(prepared.ConnPool, w)
		if err != nil {
			return err
		}
		prepared.ConnPool = wrapped
		return nil
	}
	wrapped, err := wrapPool(db.ConnPool, w)
	if err != nil {
		return err
	}
	if db.Statement != nil && samePool(db.Statement.ConnPool, db.ConnPool) {
		db.Statement.ConnPool = wrapped
	}
	db.ConnPool = wrapped
	return nil
}

// samePool reports whether a and b are the same pool, without panicking on
// pools of incomparable types.
func samePool(a, b gorm.ConnPool) bool {
	ta := reflect.TypeOf(a)
	if ta == nil || ta != reflect.TypeOf(b) || !ta.Comparable() {
		return false
	}
	return a == b
}

// registerCallbacks places the check before anything is written (after the
// implicit transaction began and the Before hooks ran, so that messages a
// BeforeCreate hook records are seen) and the enlistment after the After hooks,
// before the implicit transaction commits. GORM's sorter appends a callback with
// only an After constraint to the very end, after the commit, so the enlistment
// names both neighbours; without a default transaction the commit callback is
// not registered and the After constraint alone places it last. Savepoints are
// followed after raw statements, which is how GORM sets and rolls them back.
func registerCallbacks(db *gorm.DB) error {
	cb := db.Callback()
	create, update, del := cb.Create(), cb.Update(), cb.Delete()
	return errors.Join(
		create.Before("gorm:save_before_associations").Register(checkCallback, checkStatement),
		create.After("gorm:after_create").Before("gorm:commit_or_rollback_transaction").Register(enlistCallback, enlistPending),
		update.Before("gorm:save_before_associations").Register(checkCallback, checkStatement),
		update.After("gorm:after_update").Before("gorm:commit_or_rollback_transaction").Register(enlistCallback, enlistPending),
		del.Before("gorm:delete_before_associations").Register(checkCallback, checkStatement),
		del.After("gorm:after_delete").Before("gorm:commit_or_rollback_transaction").Register(enlistCallback, enlistPending),
		cb.Raw().After("gorm:raw").Register(savepointCallback, trackSavepoint),
	)
}
