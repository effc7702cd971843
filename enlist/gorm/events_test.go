package relayergorm_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/enlist/enlisttest"
	relayergorm "github.com/relayer-go/relayer/enlist/gorm"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

// order is a model recording domain events.
type order struct {
	ID     int64 `gorm:"primaryKey;autoIncrement:false"`
	Status string
	relayergorm.Messages
}

// plainOrder is the same table without events.
type plainOrder struct {
	ID     int64 `gorm:"primaryKey;autoIncrement:false"`
	Status string
}

func (o *order) place() *order {
	o.Record(enlisttest.Placed{N: int(o.ID)})
	return o
}

// visibleRecorder records notifications and how many of each one's rows were
// visible from another connection when it arrived. A notification that comes
// before the commit sees none; one after the commit sees every row that
// committed (a rolled-back savepoint's rows may be named, and are never seen).
type visibleRecorder struct {
	opts    store.Tables
	query   func(ids []string) (int, error)
	mu      sync.Mutex
	batches [][]relayer.Message
	visible []int
	errs    []error
}

func (r *visibleRecorder) Tables() store.Tables { return r.opts }

func (r *visibleRecorder) Committed(rows []relayer.Message) error {
	n, err := r.query(messageIDs(rows))
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errs = append(r.errs, err)
	}
	r.batches = append(r.batches, rows)
	r.visible = append(r.visible, n)
	return nil
}

func (r *visibleRecorder) Batches() [][]relayer.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

// check fails t for each notification that came before its rows committed.
func (r *visibleRecorder) check(t *testing.T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, err := range r.errs {
		t.Errorf("listener query: %v", err)
	}
	for i, rows := range r.batches {
		n, err := r.query(messageIDs(rows))
		if err != nil {
			t.Errorf("listener query: %v", err)
		} else if r.visible[i] != n {
			t.Errorf("notification %d came before the commit: %d of its %d committed rows visible", i, r.visible[i], n)
		}
	}
}

func messageIDs(rows []relayer.Message) []string {
	ids := make([]string, len(rows))
	for i, m := range rows {
		ids[i] = m.ID.String()
	}
	return ids
}

type env struct {
	t      *testing.T
	schema string
	rec    *visibleRecorder
	w      *enlist.Writer
	db     *gorm.DB
	count  func(query string) int
}

// setup makes a schema with an outbox and an orders table, a writer whose
// listener checks visibility, and a GORM handle with the plugin whose tables
// live in the schema.
func setup(t *testing.T, cfg gorm.Config) *env {
	t.Helper()
	sqlDB := testdb.Open(t, "pgx")
	sch := testdb.NewSchema(t)
	ctx := context.Background()
	opts := store.Tables{Schema: sch, TablePrefix: "ob_"}
	if _, err := store.Migrate(ctx, sqlDB, opts); err != nil {
		t.Fatal(err)
	}
	var routes relayer.Routes
	if err := relayer.AddType[enlisttest.Placed](&routes, relayer.Route{Transport: "mem", Destination: "orders.placed"}); err != nil {
		t.Fatal(err)
	}
	if err := relayer.AddType[enlisttest.Shipped](&routes, relayer.Route{Transport: "mem", Destination: "orders.shipped", Ordered: true}); err != nil {
		t.Fatal(err)
	}
	outbox := fmt.Sprintf(`"%s".ob_outbox`, sch)
	rec := &visibleRecorder{
		opts: store.Tables{Schema: sch, TablePrefix: "ob_"},
		query: func(ids []string) (n int, err error) {
			err = sqlDB.QueryRow(`SELECT count(*) FROM `+outbox+` WHERE id = ANY($1::uuid[])`, "{"+strings.Join(ids, ",")+"}").Scan(&n)
			return n, err
		},
	}
	w, err := enlist.NewWriter(relayer.Outbox{Schema: sch, TablePrefix: "ob_", Routes: &routes}, enlist.Options{Listener: rec})
	if err != nil {
		t.Fatal(err)
	}
	cfg.NamingStrategy = schema.NamingStrategy{TablePrefix: sch + "."}
	db := openGORM(t, sqlDB, w, cfg)
	// AutoMigrate runs through the wrapped pool too.
	if err := db.AutoMigrate(&order{}); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, schema: sch, rec: rec, w: w, db: db}
	e.count = func(query string) int {
		t.Helper()
		var n int
		if err := sqlDB.QueryRow(query).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	t.Cleanup(func() { rec.check(t) })
	return e
}

func (e *env) outboxRows() int {
	return e.count(fmt.Sprintf(`SELECT count(*) FROM "%s".ob_outbox`, e.schema))
}

func (e *env) orders() int {
	return e.count(fmt.Sprintf(`SELECT count(*) FROM "%s".orders`, e.schema))
}

// notified returns the number of notifications and of notified rows.
func (e *env) notified() (batches, rows int) {
	bs := e.rec.Batches()
	for _, b := range bs {
		rows += len(b)
	}
	return len(bs), rows
}

func (e *env) wantNotified(what string, batches, rows int) {
	e.t.Helper()
	if b, r := e.notified(); b != batches || r != rows {
		e.t.Errorf("%s: %d notifications of %d rows, want %d of %d", what, b, r, batches, rows)
	}
}

func TestModelEventsImplicitTransaction(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name string
		cfg  gorm.Config
	}{{"Default", gorm.Config{}}, {"PrepareStmt", gorm.Config{PrepareStmt: true}}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, mode.cfg)
			db := e.db

			o := (&order{ID: 1}).place()
			if err := db.Create(o).Error; err != nil {
				t.Fatal(err)
			}
			e.wantNotified("create", 1, 1)
			if n := len(o.PendingMessages()); n != 0 {
				t.Errorf("%d messages still pending after create", n)
			}

			o.Status = "shipped"
			o.Record(enlisttest.Shipped{N: 1}, relayer.Key("1"))
			if err := db.Save(o).Error; err != nil {
				t.Fatal(err)
			}
			e.wantNotified("save", 2, 2)

			o.Record(enlisttest.Placed{N: 2})
			o.Record(enlisttest.Placed{N: 3})
			if err := db.Model(o).Update("status", "billed").Error; err != nil {
				t.Fatal(err)
			}
			e.wantNotified("update", 3, 4)

			o.Record(enlisttest.Placed{N: 4})
			if err := db.Delete(o).Error; err != nil {
				t.Fatal(err)
			}
			e.wantNotified("delete", 4, 5)
			if e.outboxRows() != 5 || e.orders() != 0 {
				t.Fatalf("%d outbox rows and %d orders, want 5 and 0", e.outboxRows(), e.orders())
			}

			// A model without messages is written without a notification.
			if err := db.Create(&order{ID: 2}).Error; err != nil {
				t.Fatal(err)
			}
			e.wantNotified("create without messages", 4, 5)

			// A failed statement rolls its messages back with it and keeps them pending.
			dup := (&order{ID: 2}).place()
			if err := db.Create(dup).Error; err == nil {
				t.Fatal("creating a duplicate primary key succeeded")
			}
			e.wantNotified("failed create", 4, 5)
			if e.outboxRows() != 5 {
				t.Errorf("%d outbox rows after a failed create, want 5", e.outboxRows())
			}
			if n := len(dup.PendingMessages()); n != 1 {
				t.Errorf("%d messages pending after a failed create, want 1", n)
			}

			// An invalid message fails the statement and rolls the business row back.
			bad := &order{ID: 3}
			bad.Record(enlisttest.Unrouted{})
			if err := db.Create(bad).Error; !errors.Is(err, relayer.ErrInvalidMessage) {
				t.Errorf("create with an unrouted message: %v, want ErrInvalidMessage", err)
			}
			if e.orders() != 1 {
				t.Errorf("%d orders after a create with an invalid message, want 1", e.orders())
			}

			// Slices of pointers and of values: one notification for the statement.
			ptrs := []*order{(&order{ID: 10}).place(), {ID: 11}, (&order{ID: 12}).place()}
			if err := db.Create(&ptrs).Error; err != nil {
				t.Fatal(err)
			}
			e.wantNotified("create of a pointer slice", 5, 7)
			vals := []order{{ID: 20}, {ID: 21}}
			vals[0].place()
			vals[1].place()
			vals[1].Record(enlisttest.Placed{N: 99})
			if err := db.Create(&vals).Error; err != nil {
				t.Fatal(err)
			}
			e.wantNotified("create of a value slice", 6, 10)
			for i := range vals {
				if n := len(vals[i].PendingMessages()); n != 0 {
					t.Errorf("vals[%d] has %d pending messages", i, n)
				}
			}
			if e.outboxRows() != 10 || e.orders() != 6 {
				t.Errorf("%d outbox rows and %d orders, want 10 and 6", e.outboxRows(), e.orders())
			}
		})
	}
}

func TestModelEventsInTransaction(t *testing.T) {
	t.Parallel()
	e := setup(t, gorm.Config{})
	err := e.db.Transaction(func(tx *gorm.DB) error {
		o := (&order{ID: 1}).place()
		if err := tx.Create(o).Error; err != nil {
			return err
		}
		if err := relayergorm.Publish(tx, enlisttest.Placed{N: 100}); err != nil {
			return err
		}
		o.Record(enlisttest.Shipped{N: 1}, relayer.Key("1"))
		if err := tx.Model(o).Update("status", "shipped").Error; err != nil {
			return err
		}
		if b, _ := e.notified(); b != 0 {
			t.Errorf("notified %d times inside the transaction", b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e.wantNotified("transaction", 1, 3)

	boom := errors.New("boom")
	err = e.db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create((&order{ID: 2}).place()).Error; err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Transaction returned %v, want the callback's error", err)
	}
	e.wantNotified("rolled back", 1, 3)
	if e.outboxRows() != 3 || e.orders() != 1 {
		t.Errorf("%d outbox rows and %d orders, want 3 and 1", e.outboxRows(), e.orders())
	}

	// Explicit Begin and Commit.
	tx := e.db.Begin()
	if err := tx.Create((&order{ID: 3}).place()).Error; err != nil {
		t.Fatal(err)
	}
	e.wantNotified("before commit", 1, 3)
	if err := tx.Commit().Error; err != nil {
		t.Fatal(err)
	}
	e.wantNotified("after commit", 2, 4)
}

func TestSkipDefaultTransaction(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name string
		cfg  gorm.Config
		// session derives the handle, for the per-session setting.
		session bool
	}{
		{name: "Config", cfg: gorm.Config{SkipDefaultTransaction: true}},
		{name: "ConfigPrepareStmt", cfg: gorm.Config{SkipDefaultTransaction: true, PrepareStmt: true}},
		{name: "Session", session: true},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, mode.cfg)
			db := e.db
			if mode.session {
				db = db.Session(&gorm.Session{SkipDefaultTransaction: true})
			}

			o := (&order{ID: 1}).place()
			err := db.Create(o).Error
			if !errors.Is(err, relayer.ErrNotInTransaction) {
				t.Fatalf("create with pending messages outside a transaction: %v, want ErrNotInTransaction", err)
			}
			if !strings.Contains(err.Error(), "db.Transaction") {
				t.Errorf("the error does not say how to fix it: %v", err)
			}
			if e.orders() != 0 || e.outboxRows() != 0 {
				t.Errorf("%d orders and %d outbox rows written outside a transaction", e.orders(), e.outboxRows())
			}
			if n := len(o.PendingMessages()); n != 1 {
				t.Errorf("%d messages pending after the refused create, want 1", n)
			}
			if err := relayergorm.Publish(db, enlisttest.Placed{N: 1}); !errors.Is(err, relayer.ErrNotInTransaction) {
				t.Errorf("Publish outside a transaction: %v, want ErrNotInTransaction", err)
			}

			// Without messages the statement is GORM's business.
			if err := db.Create(&order{ID: 2}).Error; err != nil {
				t.Fatal(err)
			}
			// Update and Delete are refused the same way.
			two := order{ID: 2}
			two.Record(enlisttest.Placed{N: 2})
			if err := db.Model(&two).Update("status", "x").Error; !errors.Is(err, relayer.ErrNotInTransaction) {
				t.Errorf("update: %v, want ErrNotInTransaction", err)
			}
			if err := db.Delete(&two).Error; !errors.Is(err, relayer.ErrNotInTransaction) {
				t.Errorf("delete: %v, want ErrNotInTransaction", err)
			}
			if e.orders() != 1 || e.count(fmt.Sprintf(`SELECT count(*) FROM "%s".orders WHERE status = ''`, e.schema)) != 1 {
				t.Error("a refused update or delete changed the row")
			}

			// Inside a transaction it works.
			err = db.Transaction(func(tx *gorm.DB) error {
				if err := tx.Create(o).Error; err != nil {
					return err
				}
				if err := tx.Delete(&two).Error; err != nil {
					return err
				}
				return relayergorm.Publish(tx, enlisttest.Placed{N: 3})
			})
			if err != nil {
				t.Fatal(err)
			}
			e.wantNotified("transaction", 1, 3)
			if e.orders() != 1 || e.outboxRows() != 3 {
				t.Errorf("%d orders and %d outbox rows, want 1 and 3", e.orders(), e.outboxRows())
			}
		})
	}
}

func TestPrepareStmtNestedSavepoint(t *testing.T) {
	t.Parallel()
	e := setup(t, gorm.Config{PrepareStmt: true})
	var keptIDs []string
	err := e.db.Transaction(func(tx *gorm.DB) error {
		if _, ok := tx.Statement.ConnPool.(*gorm.PreparedStmtTX); !ok {
			t.Errorf("the transaction's pool is %T, want *gorm.PreparedStmtTX: the test does not test PrepareStmt", tx.Statement.ConnPool)
		}
		if err := tx.Create((&order{ID: 1}).place()).Error; err != nil {
			return err
		}
		err := tx.Transaction(func(tx *gorm.DB) error {
			if err := tx.Create((&order{ID: 2}).place()).Error; err != nil {
				return err
			}
			if err := relayergorm.Publish(tx, enlisttest.Placed{N: 20}); err != nil {
				return err
			}
			return errors.New("undo the nested part")
		})
		if err == nil {
			return errors.New("the nested transaction did not fail")
		}
		return tx.Transaction(func(tx *gorm.DB) error {
			if err := tx.Create((&order{ID: 3}).place()).Error; err != nil {
				return err
			}
			return relayergorm.Publish(tx, enlisttest.Placed{N: 30})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := e.db.Raw(fmt.Sprintf(`SELECT id::text FROM "%s".ob_outbox ORDER BY id`, e.schema)).Rows()
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		keptIDs = append(keptIDs, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(keptIDs) != 3 || e.orders() != 2 {
		t.Fatalf("%d outbox rows and %d orders, want 3 and 2: the rolled-back savepoint's rows must be gone", len(keptIDs), e.orders())
	}
	batches := e.rec.Batches()
	if len(batches) != 1 {
		t.Fatalf("%d notifications, want 1", len(batches))
	}
	var notified []string
	for _, m := range batches[0] {
		notified = append(notified, m.ID.String())
	}
	for _, id := range keptIDs {
		if !slices.Contains(notified, id) {
			t.Errorf("committed row %s was not notified", id)
		}
	}
	// The savepoint's two rows may be named too (listeners skip missing rows).
	if len(notified) > 5 {
		t.Errorf("notified %d rows, want at most 5", len(notified))
	}
}

func TestPublishOutsideTransaction(t *testing.T) {
	t.Parallel()
	e := setup(t, gorm.Config{})
	if err := relayergorm.Publish(e.db, enlisttest.Placed{}); !errors.Is(err, relayer.ErrNotInTransaction) || !strings.Contains(err.Error(), "db.Transaction") {
		t.Errorf("Publish on the pool: %v, want ErrNotInTransaction saying to use db.Transaction", err)
	}
	if err := relayergorm.PublishAll(nil); !errors.Is(err, relayer.ErrNotInTransaction) {
		t.Errorf("PublishAll(nil): %v, want ErrNotInTransaction", err)
	}

	// A *gorm.DB without the plugin.
	plain, err := gorm.Open(e.db.Dialector, &gorm.Config{Logger: e.db.Logger})
	if err != nil {
		t.Fatal(err)
	}
	err = plain.Transaction(func(tx *gorm.DB) error {
		return relayergorm.Publish(tx, enlisttest.Placed{})
	})
	if !errors.Is(err, relayer.ErrNotInTransaction) || !strings.Contains(err.Error(), "db.Use(relayergorm.Plugin") {
		t.Errorf("Publish without the plugin: %v, want ErrNotInTransaction saying to install it", err)
	}

	// A transaction begun on a dedicated connection bypasses the plugin's pool.
	err = e.db.Connection(func(conn *gorm.DB) error {
		return conn.Transaction(func(tx *gorm.DB) error {
			return relayergorm.Publish(tx, enlisttest.Placed{})
		})
	})
	if !errors.Is(err, relayer.ErrNotInTransaction) || !strings.Contains(err.Error(), "did not begin") {
		t.Errorf("Publish in a transaction of db.Connection: %v, want ErrNotInTransaction naming the foreign transaction", err)
	}

	// After the transaction ended.
	tx := e.db.Begin()
	if err := tx.Rollback().Error; err != nil {
		t.Fatal(err)
	}
	if err := relayergorm.Publish(tx, enlisttest.Placed{}); !errors.Is(err, relayer.ErrNotInTransaction) {
		t.Errorf("Publish after rollback: %v, want ErrNotInTransaction", err)
	}
	if n := e.outboxRows(); n != 0 {
		t.Errorf("%d rows written", n)
	}
	e.wantNotified("nothing published", 0, 0)
}

func TestPluginInstallation(t *testing.T) {
	t.Parallel()
	for _, prepare := range []bool{false, true} {
		t.Run(fmt.Sprintf("PrepareStmt=%v", prepare), func(t *testing.T) {
			t.Parallel()
			e := setup(t, gorm.Config{PrepareStmt: prepare})
			sqlDB, err := e.db.DB()
			if err != nil || sqlDB == nil {
				t.Fatalf("db.DB() = %v, %v", sqlDB, err)
			}
			err = e.db.Transaction(func(tx *gorm.DB) error {
				inTx, err := tx.DB()
				if err != nil {
					return err
				}
				if inTx != sqlDB {
					t.Errorf("tx.DB() is another *sql.DB")
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := e.db.Use(relayergorm.Plugin(e.w)); err == nil {
				t.Error("installing the plugin twice succeeded")
			}
			// Queries keep working through the wrapped pool.
			orders := func() *gorm.DB { return e.db.Table(e.schema + ".orders") }
			if err := orders().Create(&plainOrder{ID: 7, Status: "new"}).Error; err != nil {
				t.Fatal(err)
			}
			var got plainOrder
			if err := orders().First(&got, 7).Error; err != nil || got.Status != "new" {
				t.Errorf("First = %+v, %v", got, err)
			}
			// The embedded Messages maps no column.
			cols := e.count(fmt.Sprintf(`SELECT count(*) FROM information_schema.columns WHERE table_schema = '%s' AND table_name = 'orders'`, e.schema))
			if cols != 2 {
				t.Errorf("orders has %d columns, want 2 (id, status)", cols)
			}
		})
	}
	t.Run("NilWriter", func(t *testing.T) {
		t.Parallel()
		db, err := gorm.Open(nil, &gorm.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Use(relayergorm.Plugin(nil)); err == nil {
			t.Error("installing a plugin with a nil writer succeeded")
		}
	})
}

// An invalid message fails the statement before it writes the business row,
// so that a transaction going on after the error cannot commit the row
// without its messages.
func TestInvalidModelEventsRefusedBeforeStatement(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name string
		cfg  gorm.Config
	}{{"Default", gorm.Config{}}, {"PrepareStmt", gorm.Config{PrepareStmt: true}}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, mode.cfg)
			ordersIn := func(tx *gorm.DB, where string) int64 {
				t.Helper()
				var n int64
				if err := tx.Table(e.schema + ".orders").Where(where).Count(&n).Error; err != nil {
					t.Fatal(err)
				}
				return n
			}
			good := (&order{ID: 3}).place()
			err := e.db.Transaction(func(tx *gorm.DB) error {
				unrouted := &order{ID: 1}
				unrouted.Record(enlisttest.Unrouted{})
				if err := tx.Create(unrouted).Error; !errors.Is(err, relayer.ErrInvalidMessage) {
					t.Errorf("create with an unrouted message: %v, want ErrInvalidMessage", err)
				}
				// An ordered route needs a key; the valid message before it
				// does not make the batch valid.
				unkeyed := (&order{ID: 2}).place()
				unkeyed.Record(enlisttest.Shipped{N: 2})
				if err := tx.Create(unkeyed).Error; !errors.Is(err, relayer.ErrInvalidMessage) {
					t.Errorf("create with an ordered message without a key: %v, want ErrInvalidMessage", err)
				}
				if n := ordersIn(tx, "id IN (1, 2)"); n != 0 {
					t.Errorf("%d refused orders written in the transaction", n)
				}
				e.wantPending("after the refused create", unkeyed, 2)

				// The transaction is intact: a valid model still saves.
				if err := tx.Create(good).Error; err != nil {
					return err
				}
				good.Status = "shipped"
				good.Record(enlisttest.Unrouted{})
				if err := tx.Save(good).Error; !errors.Is(err, relayer.ErrInvalidMessage) {
					t.Errorf("save with an unrouted message: %v, want ErrInvalidMessage", err)
				}
				if err := tx.Model(good).Update("status", "billed").Error; !errors.Is(err, relayer.ErrInvalidMessage) {
					t.Errorf("update with an unrouted message: %v, want ErrInvalidMessage", err)
				}
				if err := tx.Delete(good).Error; !errors.Is(err, relayer.ErrInvalidMessage) {
					t.Errorf("delete with an unrouted message: %v, want ErrInvalidMessage", err)
				}
				if n := ordersIn(tx, "id = 3 AND status = ''"); n != 1 {
					t.Error("a refused save, update or delete changed the row")
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			e.wantStored("after the commit", 1, 1)
			if n := e.count(fmt.Sprintf(`SELECT count(*) FROM "%s".orders WHERE id = 3 AND status = ''`, e.schema)); n != 1 {
				t.Error("the committed row has the refused save's status")
			}
			// The valid message is forgotten, the invalid one is still pending.
			if p := good.PendingMessages(); len(p) != 1 || p[0].Message != (enlisttest.Unrouted{}) {
				t.Errorf("pending after the commit: %+v, want the unrouted message only", p)
			}
		})
	}
}

// The error of Publish outside a transaction names SkipDefaultTransaction
// only when it is what left the statement without a transaction.
func TestNotInTransactionNamesTheCause(t *testing.T) {
	t.Parallel()
	e := setup(t, gorm.Config{})
	err := relayergorm.Publish(e.db, enlisttest.Placed{})
	if !errors.Is(err, relayer.ErrNotInTransaction) || !strings.Contains(err.Error(), "db.Transaction") {
		t.Errorf("Publish on the pool: %v, want ErrNotInTransaction saying to use db.Transaction", err)
	}
	if strings.Contains(err.Error(), "SkipDefaultTransaction") {
		t.Errorf("Publish on the pool without SkipDefaultTransaction names it: %v", err)
	}

	skip := e.db.Session(&gorm.Session{SkipDefaultTransaction: true})
	err = relayergorm.Publish(skip, enlisttest.Placed{})
	if !errors.Is(err, relayer.ErrNotInTransaction) || !strings.Contains(err.Error(), "SkipDefaultTransaction") {
		t.Errorf("Publish with SkipDefaultTransaction: %v, want ErrNotInTransaction naming SkipDefaultTransaction", err)
	}
	err = skip.Create((&order{ID: 1}).place()).Error
	if !errors.Is(err, relayer.ErrNotInTransaction) || !strings.Contains(err.Error(), "SkipDefaultTransaction") {
		t.Errorf("Create with SkipDefaultTransaction: %v, want ErrNotInTransaction naming SkipDefaultTransaction", err)
	}
}
