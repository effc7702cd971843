package command

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/relayer-go/relayer/store"
)

// ConnectTimeout bounds opening and checking the database connection.
const ConnectTimeout = 10 * time.Second

// OutboxFlags are the flags every operator command shares.
type OutboxFlags struct {
	// DatabaseURL is --database-url; Open reads $DATABASE_URL when it is
	// empty.
	DatabaseURL string
	// Schema is --schema, store.SchemaDefault unless given.
	Schema string
	// Prefix is --prefix, the outbox's table prefix.
	Prefix string
	// fs is the command's flag set, whose output is its standard error;
	// warned is set once Open has warned of a password in --database-url.
	fs     *flag.FlagSet
	warned bool
}

// Register defines --schema and --prefix on fs, and --database-url when
// needDB; warnings go to fs's output.
func (f *OutboxFlags) Register(fs *flag.FlagSet, needDB bool) {
	f.fs = fs
	if needDB {
		// The environment is read after parsing, so that -h never prints a
		// password from it.
		fs.StringVar(&f.DatabaseURL, "database-url", "",
			"PostgreSQL URL, such as postgres://user@host:5432/db (default $DATABASE_URL)")
	}
	fs.StringVar(&f.Schema, "schema", store.SchemaDefault, "schema holding the outbox tables")
	fs.StringVar(&f.Prefix, "prefix", "", "table prefix of the outbox")
}

// Options validates --schema and --prefix, naming the flag that is wrong.
func (f *OutboxFlags) Options() (store.Tables, error) {
	if err := (store.Tables{Schema: f.Schema}).Validate(); err != nil {
		return store.Tables{}, Usagef("--schema %q: %v", f.Schema, Reason(err, f.Schema))
	}
	if err := (store.Tables{TablePrefix: f.Prefix}).Validate(); err != nil {
		return store.Tables{}, Usagef("--prefix %q: %v", f.Prefix, Reason(err, f.Prefix))
	}
	return store.Tables{Schema: f.Schema, TablePrefix: f.Prefix}, nil
}

// Reason keeps the rule from a store validation error, whose text repeats
// the field and value that the flag name and value already give.
func Reason(err error, value string) string {
	msg := err.Error()
	quoted := strconv.Quote(value)
	if i := strings.Index(msg, quoted); i >= 0 {
		return strings.TrimLeft(msg[i+len(quoted):], ": ")
	}
	return msg
}

// Connect parses a command's flags, validates the outbox options and opens
// the database: the start of every command that reads an outbox.
func (f *OutboxFlags) Connect(ctx context.Context, fs *flag.FlagSet, args []string) (store.Tables, *sql.DB, error) {
	if err := Parse(fs, args); err != nil {
		return store.Tables{}, nil, err
	}
	return f.Open(ctx)
}

// OpenStore validates --schema and --prefix, opens the database and returns
// a store on it, for commands that parsed and checked their other flags
// first. The caller closes db.
func (f *OutboxFlags) OpenStore(ctx context.Context) (store.Tables, *sql.DB, *store.Store, error) {
	opts, db, err := f.Open(ctx)
	if err != nil {
		return store.Tables{}, nil, nil, err
	}
	st, err := CheckedStore(ctx, db, opts)
	if err != nil {
		db.Close()
		return store.Tables{}, nil, nil, err
	}
	return opts, db, st, nil
}

// CheckedStore returns the outbox's store. Tables that are missing or lack
// a migration fail it with the command that migrates them, rather than
// with the database's "relation does not exist"; tables a newer release
// migrated are fine to read.
func CheckedStore(ctx context.Context, db *sql.DB, opts store.Tables) (*store.Store, error) {
	st, err := store.New(db, opts)
	if err != nil {
		return nil, err
	}
	if _, err := st.CheckSchema(ctx); err != nil && !errors.Is(err, store.ErrSchemaNewer) {
		return nil, err
	}
	return st, nil
}

// Open validates --schema and --prefix, then opens --database-url, or
// $DATABASE_URL when it is not given. The caller closes db.
func (f *OutboxFlags) Open(ctx context.Context) (store.Tables, *sql.DB, error) {
	opts, err := f.Options()
	if err != nil {
		return store.Tables{}, nil, err
	}
	url := f.DatabaseURL
	if url == "" {
		url = os.Getenv("DATABASE_URL")
	} else if hasPassword(url) && !f.warned && f.fs != nil {
		f.warned = true
		fmt.Fprintf(f.fs.Output(), "%s: warning: --database-url carries a password, which the process list shows to "+
			"every user of this machine; set it in DATABASE_URL, PGPASSWORD or a password file instead\n", f.fs.Name())
	}
	db, err := OpenDB(ctx, url)
	if err != nil {
		return store.Tables{}, nil, err
	}
	return opts, db, nil
}

// keywordPassword matches the password setting of a connection string in
// PostgreSQL's keyword/value form.
var keywordPassword = regexp.MustCompile(`(^|\s)password\s*=\s*\S`)

// hasPassword reports whether a connection string carries a password: in a
// URL's user information, its password parameter, or the password keyword.
func hasPassword(conn string) bool {
	if u, err := url.Parse(conn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		p, _ := u.User.Password()
		return p != "" || u.Query().Get("password") != ""
	}
	return keywordPassword.MatchString(conn)
}

// OpenDB opens url with pgx's database/sql driver and checks that the server
// answers, within ConnectTimeout.
func OpenDB(ctx context.Context, url string) (*sql.DB, error) {
	if url == "" {
		return nil, Usagef("--database-url is required (or set DATABASE_URL)")
	}
	if _, err := pgx.ParseConfig(url); err != nil {
		return nil, Usagef("--database-url: %v", err)
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, Usagef("--database-url: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("--database-url: cannot connect: %v", err)
	}
	return db, nil
}
