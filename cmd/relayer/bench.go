package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	"github.com/relayer-go/relayer/enlist"
	relayerpgx "github.com/relayer-go/relayer/enlist/pgx"
	"github.com/relayer-go/relayer/internal/tool/bench"
	relayernats "github.com/relayer-go/relayer/transport/nats"
)

type benchFlags struct {
	databaseURL, schema, scenarios, sink, natsURL                                       string
	kafkaBrokers, kafkaTopic, amqpURL, contenders, cpuProfile                           string
	keep, quick, asJSON                                                                 bool
	producers, rate, perTx, backlog, orderedBacklog, orderedBatchSize, bodySize, rounds int
	duration                                                                            time.Duration
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseBenchFlags(args, stderr)
	if err != nil {
		return err
	}
	cfg, err := f.config()
	if err != nil {
		return err
	}
	db, _, stop, err := openOrStartDB(ctx, f.databaseURL, stderr, "bench", f.producers+24)
	if err != nil {
		return err
	}
	defer stop()
	cfg.DB = db
	stopSink, err := f.openSink(ctx, &cfg)
	if err != nil {
		return err
	}
	defer stopSink()
	steps := newStepper(stderr, bench.Steps(cfg))
	cfg.Progress = steps.step
	if f.cpuProfile != "" {
		stopProfile, err := startCPUProfile(f.cpuProfile)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	results, err := bench.Run(ctx, cfg)
	steps.stop()
	if perr := f.print(stdout, cfg, results); perr != nil {
		return perr
	}
	return err
}

// print writes the results as a table, or as JSON lines with --json.
func (f *benchFlags) print(stdout io.Writer, cfg bench.Config, results []bench.Result) error {
	if !f.asJSON {
		printBench(stdout, cfg, results)
		return nil
	}
	enc := command.NewJSONEncoder(stdout)
	for _, r := range results {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// parseBenchFlags reads the bench command's flags.
func parseBenchFlags(args []string, stderr io.Writer) (*benchFlags, error) {
	var f benchFlags
	fs := command.NewFlagSet("bench", `Measures the outbox on a database: what enlistment costs a business
transaction (0, 1, 10 and 100 messages against the insert alone), end-to-end
throughput and commit-to-send latency, latency at a fixed rate, the drain of a
backlog through recovery, and ordered dispatch with 1, 2 and 4 workers, each
with a hand-written SQL loop and Relayer's direct, recovery and ordered paths
side by side, for several rounds. Each run counts lost, duplicate and
out-of-order messages. It works in its own
schema, dropped at the end unless --keep. Without --database-url it starts a
throwaway PostgreSQL cluster.`,
		"relayer bench --database-url postgres://app@db:5432/app --scenario e2e,latency --json", stderr)
	fs.StringVar(&f.databaseURL, "database-url", os.Getenv("DATABASE_URL"), "PostgreSQL URL (default $DATABASE_URL; empty: a throwaway cluster)")
	fs.StringVar(&f.schema, "schema", "", "schema for the run's tables; must not exist (default relayer_bench_<pid>)")
	fs.BoolVar(&f.keep, "keep", false, "keep the run's schema afterwards")
	fs.StringVar(&f.scenarios, "scenario", strings.Join(bench.Scenarios, ","), `comma-separated scenarios to run; also "bloat", when named: an ordered backlog of --backlog rows delivered by one worker, as is and with a snapshot held open meanwhile, then the latency scenario's stream (--rate, --per-tx, --duration) to one ordered worker, likewise`)
	fs.StringVar(&f.contenders, "contender", "", `comma-separated contenders to run: "hand-written loop", "minimal loop", "relayer direct", "relayer recovery", "relayer ordered" (default: these five, and in the enlist scenario "relayer direct (pgx)", whose producers write through pgx's native interface, and "minimal loop (database/sql)", the minimal loop's producers on database/sql); also "relayer ordered remote (poll)" and "relayer ordered remote (wake)", ordered workers told of no commit but by the wake-up across processes, and "relayer relay (wake)", unordered delivery as relayer run does it, when named`)
	fs.BoolVar(&f.quick, "quick", false, "run every scenario briefly (1s, a 5,000-row backlog)")
	fs.BoolVar(&f.asJSON, "json", false, "print the results as JSON, one object per line")
	fs.StringVar(&f.sink, "sink", "memory", "where messages go: memory (an in-process sink), nats, kafka or amqp (RabbitMQ)")
	fs.StringVar(&f.natsURL, "nats-url", "", "NATS server with JetStream for --sink nats (default: an embedded one)")
	fs.StringVar(&f.kafkaBrokers, "kafka-brokers", "", "comma-separated Kafka brokers (host:port) for --sink kafka")
	fs.StringVar(&f.kafkaTopic, "kafka-topic", "relayer-bench", "the topic --sink kafka produces to")
	fs.StringVar(&f.amqpURL, "amqp-url", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ for --sink amqp; the run declares a durable queue of its own and deletes it at the end")
	fs.IntVar(&f.producers, "producers", 8, "goroutines committing transactions, 1 to 64")
	fs.DurationVar(&f.duration, "duration", 0, "length of each timed scenario (default 10s, 1s with --quick)")
	fs.IntVar(&f.rate, "rate", 2000, "the latency scenario's messages per second, in transactions of --per-tx")
	fs.IntVar(&f.perTx, "per-tx", 10, "the latency scenario's messages per transaction, 1 to 100")
	fs.IntVar(&f.backlog, "backlog", 0, "the drain and bloat scenarios' rows (default 200,000, 5,000 with --quick)")
	fs.IntVar(&f.orderedBacklog, "ordered-backlog", 0, "the ordered scenario's rows (default 20,000, 2,000 with --quick)")
	fs.IntVar(&f.orderedBatchSize, "ordered-batch-size", 0, "the ordered workers' rows per lane and batch (OrderedOptions.BatchSize, 1 to 10,000; default: the workers' default)")
	fs.IntVar(&f.bodySize, "body-size", 256, "message body size in bytes, 16 to 1 MiB")
	fs.StringVar(&f.cpuProfile, "cpu-profile", "", "write a CPU profile of the whole run (the producers, the contenders' workers and the sink) to this file, for go tool pprof")
	fs.IntVar(&f.rounds, "rounds", 0, "rounds of each scenario, the contenders alternating within a round; medians and ranges are reported (default 3, 1 with --quick)")
	if err := command.Parse(fs, args); err != nil {
		return nil, err
	}
	return &f, nil
}

// config is the benchmark's configuration from the flags, checked.
func (f *benchFlags) config() (cfg bench.Config, err error) {
	cfg = bench.Config{Contenders: []bench.Contender{bench.RelayerPGX(publishPGX)}, Schema: f.schema, Keep: f.keep, Quick: f.quick, Producers: f.producers, Duration: f.duration,
		Rate: f.rate, PerTx: f.perTx, Backlog: f.backlog, OrderedBacklog: f.orderedBacklog, OrderedBatchSize: f.orderedBatchSize, BodySize: f.bodySize, Rounds: f.rounds}
	for s := range strings.SplitSeq(f.scenarios, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.Scenarios = append(cfg.Scenarios, s)
		}
	}
	for c := range strings.SplitSeq(f.contenders, ",") {
		if c = strings.TrimSpace(c); c != "" {
			cfg.Only = append(cfg.Only, c)
		}
	}
	switch { // zero means a default to the library, not on the command line
	case f.producers < 1:
		return cfg, command.Usagef("--producers %d: must be 1 to 64", f.producers)
	case f.rate < 1:
		return cfg, command.Usagef("--rate %d: must be positive", f.rate)
	case f.perTx < 1:
		return cfg, command.Usagef("--per-tx %d: must be 1 to 100", f.perTx)
	case f.duration < 0:
		return cfg, command.Usagef("--duration %s: must be positive", f.duration)
	case f.rounds < 0:
		return cfg, command.Usagef("--rounds %d: must be 1 to 20", f.rounds)
	case f.backlog < 0:
		return cfg, command.Usagef("--backlog %d: must be positive", f.backlog)
	case f.orderedBacklog < 0:
		return cfg, command.Usagef("--ordered-backlog %d: must be positive", f.orderedBacklog)
	case f.orderedBatchSize < 0:
		return cfg, command.Usagef("--ordered-batch-size %d: must be 1 to 10,000", f.orderedBatchSize)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, command.Usagef("%s", strings.TrimPrefix(err.Error(), bench.ErrInvalidConfig.Error()+": "))
	}
	if !slices.Contains([]string{"memory", "nats", "kafka", "amqp"}, f.sink) {
		return cfg, command.Usagef("--sink %q: want memory, nats, kafka or amqp", f.sink)
	}
	if f.sink == "kafka" && strings.TrimSpace(f.kafkaBrokers) == "" {
		return cfg, command.Usagef("--sink kafka needs --kafka-brokers host:port[,host:port…]")
	}
	return cfg, nil
}

// openSink points cfg at the broker --sink names (the in-process sink by
// default) and returns what closes it.
func (f *benchFlags) openSink(ctx context.Context, cfg *bench.Config) (stop func(), err error) {
	stop = func() {}
	switch f.sink {
	case "nats":
		tr, stopNATS, err := benchNATS(ctx, f.natsURL)
		if err != nil {
			return nil, err
		}
		stop = stopNATS
		cfg.Transport, cfg.TransportName, cfg.Destination = tr, "nats", "relayer-bench.events"
	case "kafka":
		tr, topic, stopKafka, err := benchKafka(ctx, f.kafkaBrokers, f.kafkaTopic)
		if err != nil {
			return nil, err
		}
		stop = stopKafka
		cfg.Transport, cfg.TransportName, cfg.Destination = tr, "kafka", topic
	case "amqp":
		tr, queue, stopAMQP, err := benchAMQP(f.amqpURL)
		if err != nil {
			return nil, err
		}
		stop = stopAMQP
		cfg.Transport, cfg.TransportName, cfg.Destination = tr, "amqp", queue
	}
	return stop, nil
}

// benchNATS connects to url (or an embedded server), creates a memory
// stream for the run's subjects, and returns a transport to it.
func benchNATS(ctx context.Context, url string) (relayer.Transport, func(), error) {
	js, stop, err := connectJetStream(url, "relayer-bench")
	if err != nil {
		return nil, nil, err
	}
	stream := fmt.Sprintf("RELAYER_BENCH_%d", os.Getpid())
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(sctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"relayer-bench.>"},
		Storage: jetstream.MemoryStorage, Duplicates: time.Minute}); err != nil {
		stop()
		return nil, nil, fmt.Errorf("create JetStream stream %s: %w", stream, err)
	}
	tr, err := relayernats.New(js, relayernats.Options{Stream: stream})
	if err != nil {
		stop()
		return nil, nil, err
	}
	return tr, func() {
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = js.DeleteStream(dctx, stream)
		stop()
	}, nil
}

// printBench prints the results as a table.
func printBench(w io.Writer, cfg bench.Config, results []bench.Result) {
	fmt.Fprintf(w, "relayer bench: %d producers, %d-byte bodies, sink %s\n\n", max(cfg.Producers, 1), cfg.BodySize, cmp.Or(cfg.TransportName, "in-process"))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "SCENARIO\tVARIANT\tCONTENDER\tMSG/S\tTX/S\tRANGE\tRATIO\tVS LOOP\tVS MINIMAL\tCPU (DB)\tCPU VS MINIMAL\tPRODUCED/S\tBACKLOG\tP50\tP95\tP99\tLONGEST PAUSE\tLOST\tDUP\tOUT OF ORDER\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t\n", r.Scenario, r.Variant, cmp.Or(r.Contender, "-"),
			figure(r.MsgsPerSec, "%.0f"), figure(r.TxPerSec, "%.0f"), benchRange(r), figure(r.Ratio, "%.2f"), figure(r.VsLoop, "%.2f"), figure(r.VsMinimal, "%.2f"),
			cpu(r), figure(r.CPUVsMinimal, "%.2f"), figure(r.Produced, "%.0f"),
			r.Backlog, latency(r.P50), latency(r.P95), latency(r.P99), pause(r), r.Lost, r.Duplicates, r.OutOfOrder)
	}
	tw.Flush()
}

// pause is a result's longest pause between deliveries while the producers
// ran, with the longest of every round when several ran.
func pause(r bench.Result) string {
	switch {
	case r.LongestPause == 0:
		return "-"
	}
	p := latency(r.LongestPause) + " at " + r.LongestPauseAt.Round(100*time.Millisecond).String()
	if r.Rounds > 1 {
		p += " (≤ " + latency(r.LongestPauseMax) + ")"
	}
	return p
}

// benchRange is the range over the rounds of a result's headline figure.
func benchRange(r bench.Result) string {
	switch {
	case r.Rounds < 2:
		return "-"
	case r.Scenario == bench.ScenarioEnlist:
		return fmt.Sprintf("%.0f–%.0f tx/s", r.TxPerSecMin, r.TxPerSecMax)
	case r.Scenario == bench.ScenarioLatency:
		return fmt.Sprintf("p99 %s–%s", latency(r.P99Min), latency(r.P99Max))
	}
	return fmt.Sprintf("%.0f–%.0f msg/s", r.MsgsPerSecMin, r.MsgsPerSecMax)
}

// cpu is a result's CPU per transaction (enlist) or message delivered, in
// µs, with the database's part in parentheses when it was measured.
func cpu(r bench.Result) string {
	unit := "µs/msg"
	if r.Scenario == bench.ScenarioEnlist {
		unit = "µs/tx"
	}
	switch {
	case r.CPU == 0:
		return "-"
	case r.DBCPU == 0:
		return fmt.Sprintf("%.1f %s", float64(r.CPU)/1e3, unit)
	}
	return fmt.Sprintf("%.1f (%.1f) %s", float64(r.CPU)/1e3, float64(r.DBCPU)/1e3, unit)
}

func figure(v float64, format string) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

func latency(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return d.Round(10 * time.Microsecond).String()
}

// stepper shows which step of a run is going: on a terminal a bar redrawn
// in place, otherwise a line per step.
type stepper struct {
	w     io.Writer
	tty   bool
	total int
	start time.Time

	mu   sync.Mutex
	n    int
	name string
	done chan struct{}
	wg   sync.WaitGroup
}

func newStepper(w io.Writer, total int) *stepper {
	s := &stepper{w: w, tty: command.IsTerminal(w), total: total, start: time.Now(), done: make(chan struct{})}
	if s.tty {
		s.wg.Go(s.loop)
	}
	return s
}

func (s *stepper) step(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	s.name = name
	if !s.tty {
		fmt.Fprintf(s.w, "step %d/%d: %s (%s)\n", s.n, s.total, name, time.Since(s.start).Round(time.Second))
	}
}

func (s *stepper) loop() { redraw(s.w, ttyInterval, s.done, true, s.draw) }

func (s *stepper) draw() {
	s.mu.Lock()
	defer s.mu.Unlock()
	filled := 0
	if s.total > 0 {
		filled = min(barWidth, max(0, s.n-1)*barWidth/s.total)
	}
	fmt.Fprintf(s.w, "\r[%s] step %d/%d %-50s %s   ", bar(filled), s.n, s.total, s.name, time.Since(s.start).Round(100*time.Millisecond))
}

func (s *stepper) stop() {
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	s.wg.Wait()
}

// publishPGX is the business transaction of the bench's "relayer direct
// (pgx)" contender: the writer of pgx's native interface (enlist/pgx) on
// conn.
func publishPGX(ctx context.Context, conn *pgx.Conn, w *enlist.Writer, insert string, arg any, msgs []relayer.Outgoing) error {
	return relayerpgx.NewWriter(w).RunInTx(ctx, conn, pgx.TxOptions{}, func(tx *relayerpgx.Tx) error {
		if _, err := tx.Exec(ctx, insert, arg); err != nil {
			return err
		}
		return tx.PublishAll(ctx, msgs...)
	})
}

// startCPUProfile starts profiling the process's CPU into path and returns
// what stops it and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
