// Command compare runs the published comparison of docs/benchmarks.md: the
// scenarios of "relayer bench" with the hand-written loop, Relayer's
// dispatch paths and Watermill's SQL Pub/Sub (defaults and tuned), the
// contenders alternating within each round. It prints Markdown tables, or
// JSON lines with -json, and draws PNG charts with -charts.
//
//	go run ./tests/cmd/compare -charts docs/benchmarks
//
// Without -database-url (or $DATABASE_URL) it starts a throwaway PostgreSQL
// cluster from the installed binaries.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/relayer-go/relayer/internal/tool/bench"
	"github.com/relayer-go/relayer/internal/tool/pgcluster"
	"github.com/relayer-go/relayer/tests/compare"
)

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		if errors.Is(err, bench.ErrInvalidConfig) || errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	url := fs.String("database-url", os.Getenv("DATABASE_URL"), "PostgreSQL URL (default $DATABASE_URL; empty: a throwaway cluster)")
	scenarios := fs.String("scenario", strings.Join(bench.Scenarios, ","), "comma-separated scenarios")
	rounds := fs.Int("rounds", 0, "rounds, the contenders alternating within each (default 3, 1 with -quick)")
	duration := fs.Duration("duration", 0, "length of each timed run (default 10s, 1s with -quick)")
	backlog := fs.Int("backlog", 0, "the drain scenario's rows (default 200,000, 5,000 with -quick)")
	producers := fs.Int("producers", 8, "goroutines committing transactions")
	quick := fs.Bool("quick", false, "run every scenario briefly")
	asJSON := fs.Bool("json", false, "print JSON lines instead of Markdown")
	charts := fs.String("charts", "", "directory to write PNG charts to")
	only := fs.String("contender", "", "comma-separated contenders to run (default: all)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	cfg := bench.Config{Rounds: *rounds, Duration: *duration, Backlog: *backlog, Producers: *producers, Quick: *quick,
		Contenders: []bench.Contender{compare.Watermill(false), compare.Watermill(true)},
		Progress:   func(step string) { fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), step) }}
	for s := range strings.SplitSeq(*scenarios, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.Scenarios = append(cfg.Scenarios, s)
		}
	}
	for c := range strings.SplitSeq(*only, ",") {
		if c = strings.TrimSpace(c); c != "" {
			cfg.Only = append(cfg.Only, c)
		}
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if *url == "" {
		fmt.Fprintln(os.Stderr, "compare: starting a throwaway PostgreSQL cluster")
		cluster, err := pgcluster.Start(ctx, pgcluster.Options{Install: true})
		if err != nil {
			return err
		}
		defer cluster.Stop()
		*url = cluster.URL()
	}
	db, err := sql.Open("pgx", *url)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(*producers + 24)
	db.SetMaxIdleConns(*producers + 24)
	cfg.DB = db
	results, err := bench.Run(ctx, cfg)
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		for _, r := range results {
			if jerr := enc.Encode(r); jerr != nil {
				return jerr
			}
		}
	} else if werr := compare.WriteMarkdown(os.Stdout, results); werr != nil {
		return werr
	}
	if err != nil {
		return err
	}
	if *charts != "" {
		files, err := compare.WriteCharts(*charts, results)
		for _, f := range files {
			fmt.Fprintln(os.Stderr, "compare: wrote", f)
		}
		return err
	}
	return nil
}
