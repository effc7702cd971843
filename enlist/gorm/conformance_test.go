package relayergorm_test

import (
	"context"
	"database/sql"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/enlist/enlisttest"
	relayergorm "github.com/relayer-go/relayer/enlist/gorm"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// openGORM opens GORM on sqlDB with cfg and installs the plugin for w.
func openGORM(t *testing.T, sqlDB *sql.DB, w *enlist.Writer, cfg gorm.Config) *gorm.DB {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = logger.Discard
	}
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Use(relayergorm.Plugin(w)); err != nil {
		t.Fatal(err)
	}
	return db
}

// gormEntry is GORM under the conformance suite.
type gormEntry struct{ db *gorm.DB }

type gormTx struct{ tx *gorm.DB }

func (e gormEntry) Begin(ctx context.Context) (enlisttest.Tx, error) {
	tx := e.db.WithContext(ctx).Begin()
	if tx.Error != nil {
		return nil, tx.Error
	}
	return gormTx{tx: tx}, nil
}

func (e gormEntry) RunInTx(ctx context.Context, fn func(context.Context, enlisttest.Tx) error) error {
	return e.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		return fn(ctx, gormTx{tx: tx})
	})
}

func (t gormTx) Exec(_ context.Context, query string) error { return t.tx.Exec(query).Error }

func (t gormTx) Publish(_ context.Context, msgs ...relayer.Outgoing) error {
	if len(msgs) == 1 {
		return relayergorm.Publish(t.tx, msgs[0].Message, func(o *relayer.Outgoing) { *o = msgs[0] })
	}
	return relayergorm.PublishAll(t.tx, msgs...)
}

func (t gormTx) Nested(ctx context.Context, fn func(context.Context, enlisttest.Tx) error) error {
	return t.tx.Transaction(func(tx *gorm.DB) error { return fn(ctx, gormTx{tx: tx}) })
}

func (t gormTx) Commit() error   { return t.tx.Commit().Error }
func (t gormTx) Rollback() error { return t.tx.Rollback().Error }

func TestConformance(t *testing.T) {
	t.Parallel()
	modes := []struct {
		name string
		cfg  gorm.Config
		// session, when set, derives the *gorm.DB the suite uses.
		session *gorm.Session
	}{
		{name: "Default"},
		{name: "PrepareStmt", cfg: gorm.Config{PrepareStmt: true}},
		{name: "SkipDefaultTransaction", cfg: gorm.Config{SkipDefaultTransaction: true}},
		{name: "PrepareStmtSession", session: &gorm.Session{PrepareStmt: true}},
		{name: "PrepareStmtTwice", cfg: gorm.Config{PrepareStmt: true}, session: &gorm.Session{PrepareStmt: true}},
	}
	for _, driver := range testdb.Drivers() {
		for _, mode := range modes {
			t.Run(driver+"/"+mode.name, func(t *testing.T) {
				t.Parallel()
				enlisttest.Run(t, enlisttest.Adapter{
					Driver: driver,
					Open: func(t *testing.T, sqlDB *sql.DB, w *enlist.Writer) enlisttest.EntryPoint {
						db := openGORM(t, sqlDB, w, mode.cfg)
						if mode.session != nil {
							db = db.Session(mode.session)
						}
						return gormEntry{db: db}
					},
				})
			})
		}
	}
}
