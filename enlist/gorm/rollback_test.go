package relayergorm_test

import (
	"errors"
	"fmt"
	"testing"

	"gorm.io/gorm"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist/enlisttest"
)

// rollbackModes are the ways a transaction reaches the plugin's transaction:
// directly, through one PreparedStmtTX and through two.
var rollbackModes = []struct {
	name    string
	cfg     gorm.Config
	session *gorm.Session
}{
	{name: "Default"},
	{name: "PrepareStmt", cfg: gorm.Config{PrepareStmt: true}},
	{name: "PrepareStmtTwice", cfg: gorm.Config{PrepareStmt: true}, session: &gorm.Session{PrepareStmt: true}},
}

// forEachRollbackMode runs test in a fresh environment per mode.
func forEachRollbackMode(t *testing.T, test func(t *testing.T, e *env, db *gorm.DB)) {
	t.Helper()
	for _, mode := range rollbackModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, mode.cfg)
			db := e.db
			if mode.session != nil {
				db = db.Session(mode.session)
			}
			test(t, e, db)
		})
	}
}

func (e *env) wantPending(what string, o *order, want int) {
	e.t.Helper()
	if n := len(o.PendingMessages()); n != want {
		e.t.Errorf("%s: order %d has %d pending messages, want %d", what, o.ID, n, want)
	}
}

func (e *env) wantStored(what string, orders, outbox int) {
	e.t.Helper()
	if o, r := e.orders(), e.outboxRows(); o != orders || r != outbox {
		e.t.Errorf("%s: %d orders and %d outbox rows, want %d and %d", what, o, r, orders, outbox)
	}
}

// A transaction retried with the same models after a rollback must write their
// messages again: they are forgotten only once a commit kept them.
func TestModelEventsSurviveTransactionRollback(t *testing.T) {
	t.Parallel()
	forEachRollbackMode(t, func(t *testing.T, e *env, db *gorm.DB) {
		orders := []*order{(&order{ID: 1}).place(), (&order{ID: 2}).place()}
		retry := errors.New("serialization failure, retry")
		for attempt := range 2 {
			err := db.Transaction(func(tx *gorm.DB) error {
				if err := tx.Create(&orders).Error; err != nil {
					return err
				}
				if attempt == 0 {
					return retry
				}
				return nil
			})
			if attempt == 0 && !errors.Is(err, retry) {
				t.Fatalf("first attempt: %v, want the retry error", err)
			}
			if attempt == 1 && err != nil {
				t.Fatalf("second attempt: %v", err)
			}
			if attempt == 0 {
				for _, o := range orders {
					e.wantPending("after the rollback", o, 1)
				}
			}
		}
		e.wantStored("after the retry committed", 2, 2)
		e.wantNotified("after the retry committed", 1, 2)
		for _, o := range orders {
			e.wantPending("after the commit", o, 0)
		}

		// db.Begin and tx.Rollback, then a commit.
		o := (&order{ID: 3}).place()
		tx := db.Begin()
		if err := tx.Create(o).Error; err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback().Error; err != nil {
			t.Fatal(err)
		}
		e.wantPending("after tx.Rollback", o, 1)
		tx = db.Begin()
		if err := tx.Create(o).Error; err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit().Error; err != nil {
			t.Fatal(err)
		}
		e.wantPending("after tx.Commit", o, 0)
		e.wantStored("after tx.Commit", 3, 3)

		// Saving again in a new transaction publishes nothing twice.
		for _, o := range append(orders, o) {
			o.Status = "saved again"
			if err := db.Save(o).Error; err != nil {
				t.Fatal(err)
			}
		}
		e.wantStored("after saving again", 3, 3)
		e.wantNotified("after saving again", 2, 3)
	})
}

// The messages written in a savepoint that rolled back are pending again, and
// the next save writes them; those written before the savepoint are not
// written twice.
func TestModelEventsSurviveSavepointRollback(t *testing.T) {
	t.Parallel()
	forEachRollbackMode(t, func(t *testing.T, e *env, db *gorm.DB) {
		a := (&order{ID: 1}).place()
		b := (&order{ID: 2}).place()
		err := db.Transaction(func(tx *gorm.DB) error {
			if err := tx.Create(a).Error; err != nil {
				return err
			}
			err := tx.Transaction(func(tx *gorm.DB) error {
				a.Record(enlisttest.Placed{N: 10})
				a.Status = "changed"
				if err := tx.Save(a).Error; err != nil {
					return err
				}
				if err := tx.Create(b).Error; err != nil {
					return err
				}
				// A savepoint kept inside the one rolled back goes with it.
				if err := tx.Transaction(func(tx *gorm.DB) error {
					b.Record(enlisttest.Placed{N: 20})
					return tx.Model(b).Update("status", "inner").Error
				}); err != nil {
					return err
				}
				return errors.New("undo the nested part")
			})
			if err == nil {
				return errors.New("the nested transaction did not fail")
			}
			// Pending until the commit: a's first message (written before the
			// savepoint) and the two messages of each model written inside it.
			e.wantPending("after the savepoint rolled back", a, 2)
			e.wantPending("after the savepoint rolled back", b, 2)
			if n := e.outboxRows(); n != 0 {
				t.Errorf("%d outbox rows visible before the commit", n)
			}
			// The retry, in a savepoint that is kept.
			if err := tx.Transaction(func(tx *gorm.DB) error {
				if err := tx.Save(a).Error; err != nil {
					return err
				}
				return tx.Create(b).Error
			}); err != nil {
				return err
			}
			// Saving again in the same transaction writes nothing again.
			a.Status = "again"
			if err := tx.Save(a).Error; err != nil {
				return err
			}
			return tx.Save(b).Error
		})
		if err != nil {
			t.Fatal(err)
		}
		e.wantStored("after the commit", 2, 4)
		e.wantPending("after the commit", a, 0)
		e.wantPending("after the commit", b, 0)
		// The notification may also name the rows the savepoint took back.
		if b, _ := e.notified(); b != 1 {
			t.Errorf("%d notifications, want 1", b)
		}
	})
}

// A savepoint rolled back twice (PostgreSQL keeps it after ROLLBACK TO), and a
// savepoint issued by hand, undo what was written after them.
func TestModelEventsSurviveManualSavepoints(t *testing.T) {
	t.Parallel()
	e := setup(t, gorm.Config{})
	o := (&order{ID: 1}).place()
	err := e.db.Transaction(func(tx *gorm.DB) error {
		if err := tx.SavePoint("Before_Create").Error; err != nil {
			return err
		}
		for range 2 {
			if err := tx.Create(o).Error; err != nil {
				return err
			}
			// Unquoted names fold to lower case, as in PostgreSQL.
			if err := tx.Exec(`ROLLBACK TO before_create`).Error; err != nil {
				return err
			}
			e.wantPending("after ROLLBACK TO", o, 1)
		}
		if err := tx.Exec(`RELEASE SAVEPOINT before_create`).Error; err != nil {
			return err
		}
		return tx.Create(o).Error
	})
	if err != nil {
		t.Fatal(err)
	}
	e.wantStored("after the commit", 1, 1)
	e.wantPending("after the commit", o, 0)
}

// A commit that fails (here, a deferred constraint) keeps the messages
// pending, like a rollback.
func TestModelEventsSurviveFailedCommit(t *testing.T) {
	t.Parallel()
	e := setup(t, gorm.Config{})
	if err := e.db.Exec(fmt.Sprintf(`ALTER TABLE "%s".orders ADD CONSTRAINT orders_status_key UNIQUE (status) DEFERRABLE INITIALLY DEFERRED`, e.schema)).Error; err != nil {
		t.Fatal(err)
	}
	a := (&order{ID: 1, Status: "same"}).place()
	b := (&order{ID: 2, Status: "same"}).place()
	err := e.db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(a).Error; err != nil {
			return err
		}
		return tx.Create(b).Error
	})
	if err == nil {
		t.Fatal("the commit violating a deferred constraint succeeded")
	}
	e.wantStored("after the failed commit", 0, 0)
	e.wantPending("after the failed commit", a, 1)
	e.wantPending("after the failed commit", b, 1)
	e.wantNotified("after the failed commit", 0, 0)

	b.Status = "other"
	if err := e.db.Create(&[]*order{a, b}).Error; err != nil {
		t.Fatal(err)
	}
	e.wantStored("after the retry", 2, 2)
}

// Messages recorded after a model's last save in a transaction were not written
// by it: they stay pending after the commit, for the next save.
func TestModelEventsRecordedAfterLastSaveStayPending(t *testing.T) {
	t.Parallel()
	e := setup(t, gorm.Config{})
	o := (&order{ID: 1}).place()
	err := e.db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(o).Error; err != nil {
			return err
		}
		o.Record(enlisttest.Shipped{N: 1}, relayer.Key("1"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e.wantStored("after the commit", 1, 1)
	if p := o.PendingMessages(); len(p) != 1 || p[0].Message != (enlisttest.Shipped{N: 1}) {
		t.Fatalf("pending after the commit: %+v, want only the Shipped message recorded after the save", p)
	}
	if err := e.db.Save(o).Error; err != nil {
		t.Fatal(err)
	}
	e.wantStored("after the next save", 1, 2)
	e.wantPending("after the next save", o, 0)
}

// ticket is a MessageSource of its own, without TrimPendingMessages.
type ticket struct {
	ID     int64 `gorm:"primaryKey;autoIncrement:false"`
	events []relayer.Outgoing
}

func (t *ticket) PendingMessages() []relayer.Outgoing { return t.events }
func (t *ticket) ClearPendingMessages()               { t.events = nil }

func TestCustomMessageSourceSurvivesRollback(t *testing.T) {
	t.Parallel()
	e := setup(t, gorm.Config{})
	if err := e.db.AutoMigrate(&ticket{}); err != nil {
		t.Fatal(err)
	}
	tk := &ticket{ID: 1, events: []relayer.Outgoing{relayer.NewOutgoing(enlisttest.Placed{N: 1})}}
	boom := errors.New("boom")
	if err := e.db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(tk).Error; err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("Transaction: %v, want boom", err)
	}
	if len(tk.events) != 1 {
		t.Fatalf("%d events pending after the rollback, want 1", len(tk.events))
	}
	if err := e.db.Create(tk).Error; err != nil {
		t.Fatal(err)
	}
	if len(tk.events) != 0 {
		t.Errorf("%d events pending after the commit, want 0", len(tk.events))
	}
	if err := e.db.Save(tk).Error; err != nil {
		t.Fatal(err)
	}
	if n := e.outboxRows(); n != 1 {
		t.Errorf("%d outbox rows, want 1", n)
	}
}
