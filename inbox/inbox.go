package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"strings"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/store"
)

// Inbox deduplicates deliveries for consumers. It holds no connection and no
// state beyond the names of its table, so one Inbox serves any number of
// consumers and goroutines at once.
type Inbox struct {
	store *store.Store
}

// New returns an inbox whose records live in the <prefix>inbox table that
// [store.Migrate] creates for tables. It validates tables and does not touch the
// database. A consumer needs only where the tables are, not the producer's
// routes: for a [relayer.Outbox], pass store.TablesOf(outbox).
func New(tables store.Tables) (*Inbox, error) {
	st, err := store.New(noHandle{}, tables)
	if err != nil {
		return nil, err
	}
	return &Inbox{store: st}, nil
}

// noHandle is the inbox's store's own handle: none. Each Handle binds the
// store to the consumer's transaction (store.Store.With).
type noHandle struct{}

func (noHandle) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	return nil, store.ErrNilDB
}

func (noHandle) QueryContext(context.Context, string, ...any) (*sql.Rows, error) {
	return nil, store.ErrNilDB
}

// Options returns the inbox's table options with defaults applied.
func (i *Inbox) Options() store.Tables { return i.store.Tables() }

// Handle runs handler for the message messageID at most once per consumer:
// it records (consumer, messageID) in q, the consumer's open transaction,
// and calls handler only if the pair is new, returning handled = true and
// the handler's error unchanged; a duplicate returns handled = false and a
// nil error. Commit q on a nil error and roll it back on any other; Handle
// does neither. The package documentation's sections "What Handle does",
// "Concurrent deliveries" and "Data layers" give the rules in full: which
// q are refused, the errors returned, and how a concurrent delivery waits.
func (i *Inbox) Handle(ctx context.Context, q store.DBTX, consumer string, messageID uuid.UUID, handler func(ctx context.Context) error) (handled bool, err error) {
	if handler == nil {
		return false, fmt.Errorf("inbox: %w: nil handler", store.ErrInvalidArgument)
	}
	if err := checkTx(q); err != nil {
		return false, err
	}
	st, err := i.store.With(q)
	if err != nil {
		return false, fmt.Errorf("inbox: %w", err)
	}
	first, err := st.RecordInbox(ctx, consumer, messageID)
	if err != nil || !first {
		return false, err
	}
	return true, handler(ctx)
}

// HandleMessage is [Inbox.Handle] for msg.ID. A nil msg returns an error
// wrapping [store.ErrInvalidArgument].
func (i *Inbox) HandleMessage(ctx context.Context, q store.DBTX, consumer string, msg *relayer.Message, handler func(ctx context.Context) error) (handled bool, err error) {
	if msg == nil {
		return false, fmt.Errorf("inbox: %w: nil message", store.ErrInvalidArgument)
	}
	return i.Handle(ctx, q, consumer, msg.ID, handler)
}

const bunPackage = "github.com/uptrace/bun"

// checkTx refuses the handles that would silently break the inbox. It looks at
// the type only, without a round trip: a type with a BeginTx method starts
// transactions, which *sql.Tx, *sqlx.Tx and GORM's transaction pools do not.
func checkTx(q store.DBTX) error {
	if q == nil {
		return fmt.Errorf("inbox: %w", store.ErrNilDB)
	}
	t := reflect.TypeOf(q)
	elem := t
	if elem.Kind() == reflect.Pointer {
		elem = elem.Elem()
	}
	if pkg := elem.PkgPath(); pkg == bunPackage || strings.HasPrefix(pkg, bunPackage+"/") {
		return fmt.Errorf("inbox: %w: q is a %s, whose ExecContext drops $n arguments; pass the embedded *sql.Tx (tx.Tx of a bun.Tx)", store.ErrInvalidArgument, t)
	}
	if _, ok := t.MethodByName("BeginTx"); ok {
		return fmt.Errorf("inbox: %w: q is a %s, which begins transactions rather than being one; pass the consumer's transaction", store.ErrInvalidArgument, t)
	}
	return nil
}
