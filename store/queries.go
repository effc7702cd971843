package store

import (
	"math/bits"
	"strconv"
	"strings"
	"sync"

	"github.com/relayer-go/relayer/internal/storesql"
)

// queries holds the statements of the stable surface on one outbox's rows,
// built once from validated names (the workers' own are in
// internal/workerstore, built from the same names). Keeping them in one
// place is what lets a reviewer see the SQL, and keeps identifiers out of
// every other code path.
type queries struct {
	readLane      string
	readUnordered string
	countEligible string
	countDead     string
	claim         string
	claimBatch    string
	renew         string
	complete      string
	completeBatch string
	fail          string
	failBatch     string
	park          string
	releaseBatch  string
	insert        string
	insertValues  *insertStatements
	listLeases    string
	liveMembers   string
	recordInbox   string
}

func buildQueries(n names) *queries {
	return &queries{
		// lane IS NOT NULL is implied by lane = $1; it is spelled out so that the
		// partial index's predicate matches in every plan, generic ones included.
		readLane: `SELECT ` + storesql.RowColumns + ` FROM ` + n.Outbox + `
WHERE lane = $1 AND lane IS NOT NULL AND id > $2 AND ` + storesql.Eligible("$3") + `
ORDER BY id LIMIT $4`,
		readUnordered: `SELECT ` + storesql.RowColumns + ` FROM ` + n.Outbox + `
WHERE lane IS NULL AND id > $1 AND ` + storesql.Eligible("$2") + `
ORDER BY id LIMIT $3`,
		countEligible: `SELECT count(*) FROM ` + n.Outbox + ` WHERE ` + storesql.Eligible("$1"),
		countDead:     `SELECT count(*) FROM ` + n.Dead,
		claim: `UPDATE ` + n.Outbox + ` SET claim_token = $2, claimed_until = $3
WHERE id = $1 AND ` + storesql.Eligible("$4"),
		// The inner SELECT locks the candidates and skips rows another claimer is
		// locking right now; ANY(ARRAY(...)) keeps the outer UPDATE a primary-key
		// probe in every plan, where an IN (SELECT ...) join can settle on a generic
		// plan that scans the whole table.
		claimBatch: `UPDATE ` + n.Outbox + ` SET claim_token = $2, claimed_until = $3
WHERE id = ANY(ARRAY(
    SELECT id FROM ` + n.Outbox + `
    WHERE id = ANY($1::text::uuid[]) AND ` + storesql.Eligible("$4") + `
    FOR UPDATE SKIP LOCKED))
RETURNING ` + storesql.RowColumns,
		releaseBatch: `UPDATE ` + n.Outbox + ` SET claim_token = NULL, claimed_until = NULL
WHERE id = ANY($1::text::uuid[]) AND claim_token = $2 AND claimed_until > $3`,
		// Operator reads (see ops.go).
		listLeases: `SELECT name, owner, owner_token, expires_at FROM ` + n.Leases + `
WHERE expires_at > now() ORDER BY name`,
		liveMembers: `SELECT name FROM ` + n.Leases + ` WHERE name LIKE '` + storesql.MemberLeasePrefix + `%' AND expires_at > now() ORDER BY name`,
		renew: `UPDATE ` + n.Outbox + ` SET claimed_until = GREATEST(claimed_until, $3)
WHERE id = $1 AND claim_token = $2 AND claimed_until > $4`,
		complete: `DELETE FROM ` + n.Outbox + `
WHERE id = $1 AND claim_token = $2 AND claimed_until > $3`,
		completeBatch: `DELETE FROM ` + n.Outbox + `
WHERE id = ANY($1::text::uuid[]) AND claim_token = $2 AND claimed_until > $3`,
		fail: `UPDATE ` + n.Outbox + `
SET attempts = attempts + 1, last_error = $3, claim_token = NULL, claimed_until = NULL
WHERE id = $1 AND claim_token = $2 AND claimed_until > $4`,
		failBatch: `UPDATE ` + n.Outbox + ` AS o
SET attempts = o.attempts + 1, last_error = f.error, retry_at = f.retry_at, claim_token = NULL, claimed_until = NULL
FROM unnest($1::text::uuid[], $2::text::text[], $5::text::timestamptz[]) AS f(id, error, retry_at)
WHERE o.id = f.id AND o.claim_token = $3 AND o.claimed_until > $4`,
		// Parking stamps the row on the database clock; its key is held
		// from then on (see storesql.Unheld).
		park: `UPDATE ` + n.Outbox + ` AS o
SET attempts = o.attempts + 1, last_error = f.error, parked_at = now(), claim_token = NULL, claimed_until = NULL
FROM unnest($1::text::uuid[], $2::text::text[]) AS f(id, error)
WHERE o.id = f.id AND o.claim_token = $3 AND o.claimed_until > $4`,
		// Up to insertValuesMax rows as plain parameters, one statement per
		// shape (see insertShape): cheaper for the server than unnesting
		// twelve arrays (and, for one row, twelve one-element arrays).
		insertValues: insertValues(n.Outbox),
		insert: `INSERT INTO ` + n.Outbox + ` (id, message_type, transport, destination, body, headers,
    ordering_key, lane, created_at, deliver_at, trace_parent, trace_state)
SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::bytea[],
    $7::text[], $8::integer[], $9::timestamptz[], $10::timestamptz[], $11::text[], $12::text[])`,
		// A concurrent insert of the same pair waits on the primary key until the
		// first inserter's transaction ends, then inserts (it rolled back) or does
		// nothing (it committed): exactly one transaction ever commits the row.
		recordInbox: `INSERT INTO ` + n.Inbox + ` (consumer, message_id) VALUES ($1, $2)
ON CONFLICT (consumer, message_id) DO NOTHING`,
	}
}

// insertValuesMax is the most rows Insert writes with a VALUES list; more
// go through unnest.
const insertValuesMax = 128

// The columns of a VALUES insert, in the order the statement names them;
// each is a bit of an insert's column sets.
const (
	icID = iota
	icType
	icTransport
	icDestination
	icBody
	icHeaders
	icCreated
	icKey
	icLane
	icDeliver
	icParent
	icState
	insertColumns
)

// insertColumnNames names the columns of the bits above.
var insertColumnNames = [insertColumns]string{"id", "message_type", "transport", "destination", "body", "headers",
	"created_at", "ordering_key", "lane", "deliver_at", "trace_parent", "trace_state"}

const (
	// insertRequired is the columns every insert sends.
	insertRequired uint16 = 1<<(icCreated+1) - 1
	// insertShareable is the columns an insert may send once for all its
	// rows when they hold one value: all but the id, body and headers.
	insertShareable uint16 = (1<<insertColumns - 1) &^ (1<<icID | 1<<icBody | 1<<icHeaders)
	// insertStatementsMax bounds the statements an outbox keeps; past it, a
	// statement of a new shape is built for its one use.
	insertStatementsMax = 4096
)

// insertShape is what an INSERT … VALUES depends on: its row count, the
// columns it sends (the required ones, then the optional ones some row has)
// and, of those, the columns sent once as one parameter that every row's
// tuple names (see Store.insertValues).
type insertShape struct {
	rows         int
	sent, shared uint16
}

// params returns how many parameters a statement of the shape takes.
func (sh insertShape) params() int {
	return bits.OnesCount16(sh.shared) + sh.rows*bits.OnesCount16(sh.sent&^sh.shared)
}

// insertStatements makes, and keeps, the INSERT … VALUES of each shape: the
// shared columns' parameters first, in column order, then each row's own. A
// column every row leaves empty is not sent at all (it defaults to NULL),
// and a column every row holds one value of is sent once, which spares the
// client's encoding and the server's binding a parameter per row.
type insertStatements struct {
	outbox string
	mu     sync.RWMutex
	built  map[insertShape]string
}

func insertValues(outbox string) *insertStatements {
	return &insertStatements{outbox: outbox, built: map[insertShape]string{}}
}

// get returns the statement of shape sh, whose rows are 1 to insertValuesMax.
func (st *insertStatements) get(sh insertShape) string {
	st.mu.RLock()
	q, ok := st.built[sh]
	st.mu.RUnlock()
	if ok {
		return q
	}
	q = st.build(sh)
	st.mu.Lock()
	if len(st.built) < insertStatementsMax {
		st.built[sh] = q
	}
	st.mu.Unlock()
	return q
}

func (st *insertStatements) build(sh insertShape) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO ` + st.outbox + ` (`)
	var number [insertColumns]int // the parameter of each shared column
	param := 0
	for c := range insertColumns {
		if sh.sent&(1<<c) == 0 {
			continue
		}
		if c > icID { // the id is always sent, and first
			b.WriteString(", ")
		}
		b.WriteString(insertColumnNames[c])
		if sh.shared&(1<<c) != 0 {
			param++
			number[c] = param
		}
	}
	b.WriteString(`) VALUES `)
	for i := range sh.rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		first := true
		for c := range insertColumns {
			if sh.sent&(1<<c) == 0 {
				continue
			}
			if !first {
				b.WriteString(", ")
			}
			first = false
			n := number[c]
			if n == 0 {
				param++
				n = param
			}
			b.WriteString("$" + strconv.Itoa(n))
		}
		b.WriteByte(')')
	}
	return b.String()
}
