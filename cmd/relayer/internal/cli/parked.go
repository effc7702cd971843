package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	"github.com/relayer-go/relayer/store"
)

// runParked runs "relayer parked <subcommand>".
func runParked(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return group{
		name: "parked",
		summary: "A parked key is an ordering key whose delivery stopped at a message that failed for good: its later\n" +
			"messages wait behind it. List the parked keys, retry them (each resumes at its head, in order), or\n" +
			"skip a key's head to the dead letters, breaking the key's order on purpose.",
		examples: []string{
			"relayer parked list --database-url postgres://app@db:5432/app --schema messaging",
			"relayer parked retry --database-url postgres://app@db:5432/app --schema messaging --key customer-42",
			"relayer parked skip --database-url postgres://app@db:5432/app --schema messaging --key customer-42",
		},
		subs: []Command{
			{"list", "list parked keys, longest parked first, with the head's last error and the rows waiting", runParkedList},
			{"retry", "release parked keys; each resumes at its head, in order (--key, filters or --all)", runParkedRetry},
			{"skip", "move a key's parked head to the dead letters and release the rest of the key (--key)", runParkedSkip},
		},
	}.run(ctx, args, stdout, stderr)
}

// parkedSummary is a parked key as "parked list --json" prints it.
type parkedSummary struct {
	Key         string    `json:"key"`
	Lane        int       `json:"lane"`
	HeadID      string    `json:"head_id"`
	Type        string    `json:"type"`
	Transport   string    `json:"transport"`
	Destination string    `json:"destination"`
	Attempts    int       `json:"attempts"`
	LastError   string    `json:"last_error,omitempty"`
	ParkedAt    time.Time `json:"parked_at"`
	// Waiting counts the key's later rows, held behind the head.
	Waiting int `json:"waiting"`
	// Corrupt is the error decoding the head's stored headers, if they do
	// not decode.
	Corrupt string `json:"corrupt,omitempty"`
}

// summarizeParked returns the summary of p.
func summarizeParked(p store.ParkedKey) parkedSummary {
	s := parkedSummary{Key: p.Head.Key, Lane: p.Head.Lane, HeadID: p.Head.ID.String(), Type: p.Head.Type,
		Transport: p.Head.Transport, Destination: p.Head.Destination, Attempts: p.Head.Attempts,
		LastError: p.Head.LastError, ParkedAt: p.ParkedAt, Waiting: p.Waiting}
	if p.Head.Corrupt != nil {
		s.Corrupt = corruptCause(p.Head.Corrupt)
	}
	return s
}

// runParkedList runs "relayer parked list".
func runParkedList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f command.OutboxFlags
	var sel parkedSelection
	fs := command.NewFlagSet("parked list", "Lists parked keys, longest parked first: the key and its lane, the parked head with its attempts and last error, and how many rows wait behind it.",
		"relayer parked list --database-url postgres://app@db:5432/app --schema messaging --older-than 1h", stderr)
	f.Register(fs, true)
	sel.register(fs, false)
	asJSON := fs.Bool("json", false, "print JSON, one object per line")
	limit := limitFlag(fs, "parked keys")
	if err := command.Parse(fs, args); err != nil {
		return err
	}
	if err := checkLimit(*limit); err != nil {
		return err
	}
	return listing[store.ParkedKey, parkedSummary]{
		what: "parked keys", filtered: sel.selects(), limit: *limit, asJSON: *asJSON,
		read: func(ctx context.Context, st *store.Store, limit int) ([]store.ParkedKey, error) {
			return st.ParkedKeys(ctx, sel.filter(), limit)
		},
		summarize: summarizeParked,
		header:    "KEY\tLANE\tHEAD ID\tTYPE\tDESTINATION\tATTEMPTS\tPARKED AT\tWAITING\tLAST ERROR",
		row: func(w io.Writer, p store.ParkedKey) {
			h := p.Head
			fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%d\t%s\t%d\t%s\n", command.OneLine(h.Key), h.Lane, h.ID, command.OneLine(h.Type),
				command.OneLine(h.Destination), h.Attempts, p.ParkedAt.Format(time.RFC3339), p.Waiting, orDash(command.OneLine(h.LastError)))
		},
	}.run(ctx, &f, stdout)
}

// runParkedRetry runs "relayer parked retry".
func runParkedRetry(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f command.OutboxFlags
	var sel parkedSelection
	var cf changeFlags
	fs := command.NewFlagSet("parked retry", "Releases the selected parked keys: each key's parked head becomes eligible again with its attempts from zero, and the key resumes at its head, in order. Retrying again finds nothing more to do.",
		"relayer parked retry --database-url postgres://app@db:5432/app --schema messaging --key customer-42", stderr)
	f.Register(fs, true)
	sel.register(fs, true)
	cf.register(fs)
	if err := command.Parse(fs, args); err != nil {
		return err
	}
	if err := checkSelection(sel.selects(), sel.all, "retry", "parked key", parkedFilterFlags); err != nil {
		return err
	}
	_, db, st, err := f.OpenStore(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	filter := sel.filter()
	n, _, err := change{
		command: "parked retry",
		filter: nonZero(map[string]any{"type": filter.Type, "destination": filter.Destination, "key": filter.Key,
			"older_than": filter.OlderThan}),
		list: func(ctx context.Context, st *store.Store) ([]uuid.UUID, error) {
			heads, err := st.ParkedHeads(ctx, filter, maxLimit)
			ids := make([]uuid.UUID, len(heads))
			for i := range heads {
				ids[i] = heads[i].Head.ID
			}
			return ids, err
		},
		apply: func(ctx context.Context, st *store.Store) (int64, error) { return st.RetryParked(ctx, filter) },
	}.run(ctx, db, st, cf, stdout)
	if err != nil {
		return fmt.Errorf("retry parked keys: %w", err)
	}
	if !cf.asJSON {
		fmt.Fprintf(stdout, "%s %d parked keys; each resumes at its head, in order%s\n", wouldBe(cf.dryRun, "released", "release"), n, dryNote(cf.dryRun))
	}
	return nil
}

// runParkedSkip runs "relayer parked skip": it moves a key's parked head to
// the dead letters, so that the key's later messages go without it, and
// logs a warning, since that breaks the key's order on purpose.
func runParkedSkip(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f command.OutboxFlags
	var cf changeFlags
	fs := command.NewFlagSet("parked skip", "Moves the parked head of one ordering key to the dead letters (reason skipped), so that the key's later messages are delivered without it: a deliberate break of the key's order, logged as a warning. The head can be requeued later with relayer dead requeue --id.",
		"relayer parked skip --database-url postgres://app@db:5432/app --schema messaging --key customer-42", stderr)
	f.Register(fs, true)
	key := fs.String("key", "", "the ordering key whose parked head to skip (required)")
	cf.register(fs)
	if err := command.Parse(fs, args); err != nil {
		return err
	}
	if *key == "" {
		return command.Usagef("--key is required: the ordering key whose parked head to skip")
	}
	opts, db, st, err := f.OpenStore(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	var head store.ParkedKey
	n, _, err := change{
		command: "parked skip",
		filter:  map[string]any{"key": *key},
		list: func(ctx context.Context, st *store.Store) ([]uuid.UUID, error) {
			parked, err := st.ParkedKeys(ctx, store.ParkedFilter{Key: *key}, maxLimit)
			if err != nil || len(parked) == 0 {
				return nil, err
			}
			head = firstByID(parked)
			return []uuid.UUID{head.Head.ID}, nil
		},
		apply: func(ctx context.Context, st *store.Store) (int64, error) {
			if head.Head.ID == uuid.Nil {
				return 0, nil
			}
			return st.SkipParkedHead(ctx, *key)
		},
	}.run(ctx, db, st, cf, stdout)
	if err != nil {
		return fmt.Errorf("skip the parked head of key %s: %w", *key, err)
	}
	switch {
	case cf.asJSON:
	case n == 0:
		fmt.Fprintf(stdout, "key %s has no parked head\n", *key)
	default:
		fmt.Fprintf(stdout, "%s message %s (type %s, destination %s), the parked head of key %s: it %s a dead letter (reason %s); the %d messages waiting behind it %s without it%s\n",
			wouldBe(cf.dryRun, "skipped", "skip"), head.Head.ID, command.OneLine(head.Head.Type), command.OneLine(head.Head.Destination), command.OneLine(*key),
			wouldBe(cf.dryRun, "is now", "be"), store.ReasonSkipped, head.Waiting, wouldBe(cf.dryRun, "go on", "go on"), dryNote(cf.dryRun))
	}
	if n > 0 && !cf.dryRun {
		slog.New(slog.NewTextHandler(stderr, nil)).Warn("skipped the parked head of an ordered key: the key's order is broken on purpose",
			"key", *key, "message_id", head.Head.ID.String(), "type", head.Head.Type, "destination", head.Head.Destination,
			"waiting", head.Waiting, "outbox", describe(opts))
	}
	return nil
}

// firstByID returns the parked row with the smallest id, the one
// SkipParkedHead moves when a key has several.
func firstByID(parked []store.ParkedKey) store.ParkedKey {
	first := parked[0]
	for _, p := range parked[1:] {
		if bytes.Compare(p.Head.ID[:], first.Head.ID[:]) < 0 {
			first = p
		}
	}
	return first
}
