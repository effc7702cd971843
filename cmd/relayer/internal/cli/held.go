package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	"github.com/relayer-go/relayer/consume/heldkeys"
)

// runHeld runs "relayer held <subcommand>".
func runHeld(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return group{
		name: "held",
		summary: "A held key is an ordering key a consumer holds after one of its messages failed: the message and the\n" +
			"key's later ones wait in the consumer's database, in order, while the consumer tries it again. List the\n" +
			"held keys, retry them at once, or skip a key's first message to the consumer's dead letters.",
		examples: []string{
			"relayer held list --database-url postgres://billing@db:5432/billing --schema billing",
			"relayer held retry --database-url postgres://billing@db:5432/billing --consumer billing --key customer-42",
			"relayer held skip --database-url postgres://billing@db:5432/billing --consumer billing --key customer-42",
		},
		subs: []Command{
			{"list", "list held keys, longest held first, with the first message's attempts and last error", runHeldList},
			{"retry", "try held keys' first messages again at once, attempts from zero (--consumer, --key)", runHeldRetry},
			{"skip", "send a held key's first message to the consumer's dead letters; the key goes on (--consumer, --key)", runHeldSkip},
		},
	}.run(ctx, args, stdout, stderr)
}

// heldSummary is a held key as "held list --json" prints it.
type heldSummary struct {
	Consumer    string    `json:"consumer"`
	Key         string    `json:"key"`
	Since       time.Time `json:"since"`
	HeadID      string    `json:"head_id,omitempty"`
	Type        string    `json:"type,omitempty"`
	Destination string    `json:"destination,omitempty"`
	Attempts    int       `json:"attempts"`
	RetryAt     time.Time `json:"retry_at"`
	LastError   string    `json:"last_error,omitempty"`
	Skipping    bool      `json:"skipping,omitempty"`
	// Waiting counts the key's messages in the consumer's database, the
	// first one included.
	Waiting int `json:"waiting"`
}

func summarizeHeld(k heldkeys.Key) heldSummary {
	s := heldSummary{Consumer: k.Consumer, Key: k.Key, Since: k.Since, Type: k.HeadType, Destination: k.HeadDestination,
		Attempts: k.Attempts, RetryAt: k.RetryAt, LastError: k.LastError, Skipping: k.Skipping, Waiting: k.Waiting}
	if k.Waiting > 0 {
		s.HeadID = k.HeadID.String()
	}
	return s
}

// runHeldList runs "relayer held list".
func runHeldList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f command.OutboxFlags
	fs := command.NewFlagSet("held list", "Lists the keys consumers hold, longest held first: the consumer and the key, the first waiting message with its attempts, next try and last error, and how many messages wait.",
		"relayer held list --database-url postgres://billing@db:5432/billing --schema billing --consumer billing", stderr)
	f.Register(fs, true)
	consumer := fs.String("consumer", "", "only this consumer's held keys")
	key := fs.String("key", "", "only this ordering key")
	asJSON := fs.Bool("json", false, "print JSON, one object per line")
	limit := limitFlag(fs, "held keys")
	if err := command.Parse(fs, args); err != nil {
		return err
	}
	if err := checkLimit(*limit); err != nil {
		return err
	}
	opts, db, err := f.Open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	keys, err := heldkeys.List(ctx, db, opts, heldkeys.Filter{Consumer: *consumer, Key: *key}, *limit)
	if err != nil {
		return fmt.Errorf("list held keys: %w", err)
	}
	if *asJSON {
		enc := command.NewJSONEncoder(stdout)
		for _, k := range keys {
			if err := enc.Encode(summarizeHeld(k)); err != nil {
				return err
			}
		}
		return nil
	}
	if len(keys) == 0 {
		fmt.Fprintf(stdout, "no held keys %sin outbox %s\n", matching(*consumer != "" || *key != ""), describe(opts))
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CONSUMER\tKEY\tHELD SINCE\tFIRST MESSAGE\tTYPE\tATTEMPTS\tNEXT TRY\tWAITING\tLAST ERROR")
	for _, k := range keys {
		s := summarizeHeld(k)
		next := s.RetryAt.Format(time.RFC3339)
		if s.Skipping {
			next = "skipping"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\n", command.OneLine(s.Consumer), command.OneLine(s.Key), s.Since.Format(time.RFC3339),
			orDash(s.HeadID), orDash(command.OneLine(s.Type)), s.Attempts, next, s.Waiting, orDash(command.OneLine(s.LastError)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(keys) == *limit {
		fmt.Fprintf(stdout, "(first %d rows; raise --limit for more)\n", *limit)
	}
	return nil
}

// runHeldRetry runs "relayer held retry".
func runHeldRetry(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f command.OutboxFlags
	fs := command.NewFlagSet("held retry", "Makes the first waiting message of each selected held key due at once, its attempts from zero: the consumers try it again within their poll, and the key's later messages follow in order once it succeeds.",
		"relayer held retry --database-url postgres://billing@db:5432/billing --schema billing --consumer billing --key customer-42", stderr)
	f.Register(fs, true)
	consumer := fs.String("consumer", "", "the consumer whose held keys to retry")
	key := fs.String("key", "", "the ordering key to retry")
	if err := command.Parse(fs, args); err != nil {
		return err
	}
	if *consumer == "" && *key == "" {
		return command.Usagef("--consumer, --key or both are required: the held keys to retry")
	}
	opts, db, err := f.Open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	n, err := heldkeys.Retry(ctx, db, opts, heldkeys.Filter{Consumer: *consumer, Key: *key})
	if err != nil {
		return fmt.Errorf("retry held keys: %w", err)
	}
	fmt.Fprintf(stdout, "retried %d held keys; their consumers try each first message again within their poll\n", n)
	return nil
}

// runHeldSkip runs "relayer held skip", logging a warning, since it breaks
// the key's order on purpose.
func runHeldSkip(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f command.OutboxFlags
	fs := command.NewFlagSet("held skip", "Marks the first waiting message of one consumer's held key for the dead letters: the consumer sends it to its dead letters (reason: skipped) within its poll, and the key's later messages go on without it, a deliberate break of the key's order, logged as a warning.",
		"relayer held skip --database-url postgres://billing@db:5432/billing --schema billing --consumer billing --key customer-42", stderr)
	f.Register(fs, true)
	consumer := fs.String("consumer", "", "the consumer holding the key (required)")
	key := fs.String("key", "", "the held ordering key (required)")
	if err := command.Parse(fs, args); err != nil {
		return err
	}
	if *consumer == "" || *key == "" {
		return command.Usagef("--consumer and --key are required: the held key whose first message to skip")
	}
	opts, db, err := f.Open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	held, err := heldkeys.List(ctx, db, opts, heldkeys.Filter{Consumer: *consumer, Key: *key}, 1)
	if err != nil {
		return fmt.Errorf("skip held key %s: %w", *key, err)
	}
	if len(held) == 0 || held[0].Waiting == 0 {
		fmt.Fprintf(stdout, "consumer %s holds no key %s with a message waiting\n", command.OneLine(*consumer), command.OneLine(*key))
		return nil
	}
	ok, err := heldkeys.Skip(ctx, db, opts, *consumer, *key, held[0].HeadID)
	if err != nil {
		return fmt.Errorf("skip held key %s: %w", *key, err)
	}
	if !ok {
		fmt.Fprintf(stdout, "message %s is no longer the first of key %s: nothing skipped; list the held keys again\n", held[0].HeadID, command.OneLine(*key))
		return nil
	}
	s := summarizeHeld(held[0])
	fmt.Fprintf(stdout, "skipping message %s (type %s), the first of key %s held by %s: the consumer sends it to its dead letters, and the %d messages behind it go on without it\n",
		orDash(s.HeadID), orDash(command.OneLine(s.Type)), command.OneLine(*key), command.OneLine(*consumer), max(s.Waiting-1, 0))
	slog.New(slog.NewTextHandler(stderr, nil)).Warn("skipped the first message of a held key: the key's order is broken on purpose",
		"consumer", *consumer, "key", *key, "message_id", s.HeadID, "outbox", describe(opts))
	return nil
}
