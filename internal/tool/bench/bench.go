// Package bench runs the benchmark scenarios of the relayer command ("relayer
// bench") against a database the caller names: what enlistment costs a
// business transaction, end-to-end throughput and latency, the drain of a
// backlog, and ordered dispatch. Each scenario measures every [Contender]
// that takes part in it (the hand-written loop, Relayer's direct, recovery
// and ordered paths, and any the caller adds), the contenders alternating
// within each of several rounds. Every run works in tables of its own in one
// schema, counts lost, duplicate and out-of-order messages, and returns
// figures rather than printing them.
//
// It is one of four places that measure Relayer, each answering its own
// question: this package, through "relayer bench", how Relayer compares with
// a hand-written loop on the machine at hand; tests/compare (run by
// tests/cmd/compare) how it compares with Watermill, for the published
// charts; the packages' Go benchmarks (dispatch, store, enlist, headers, the
// adapters, the console) what one component costs; and the tests module's
// broker and OpenTelemetry benchmarks what a transport or the wrapper adds.
// docs/benchmarks.md maps them with the command that runs each.
package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/store"
)

// Scenario names, in the order Run runs them.
const (
	ScenarioEnlist  = "enlist"
	ScenarioE2E     = "e2e"
	ScenarioLatency = "latency"
	ScenarioDrain   = "drain"
	ScenarioOrdered = "ordered"
	ScenarioBloat   = "bloat"
)

// Scenarios lists the scenarios a run takes by default, in the order Run
// runs them.
var Scenarios = []string{ScenarioEnlist, ScenarioE2E, ScenarioLatency, ScenarioDrain, ScenarioOrdered}

// AllScenarios lists every scenario, in the order Run runs them: the
// defaults, then those that run only when named. ScenarioBloat delivers an
// ordered backlog with one worker twice, as is and with a snapshot held open
// meanwhile (an analytics query, a forgotten transaction), so that no row
// deleted during the delivery can be vacuumed before it ends; then the
// latency scenario's stream to one ordered worker, likewise twice.
var AllScenarios = append(slices.Clone(Scenarios), ScenarioBloat)

// ErrInvalidConfig is returned for a Config field out of range.
var ErrInvalidConfig = errors.New("bench: invalid config")

// Config is one benchmark run. Zero fields mean their defaults; Quick
// shrinks every default so that a whole run takes seconds.
type Config struct {
	// DB is the database to run in; it must allow Producers + 24
	// connections.
	DB *sql.DB
	// Schema holds the run's tables, dropped at the end unless Keep is set.
	// It must not exist yet. Default: relayer_bench_<pid>.
	Schema string
	Keep   bool
	// Scenarios to run, from [AllScenarios]. Default: [Scenarios].
	Scenarios []string
	// Quick runs every scenario briefly, for smoke tests.
	Quick bool
	// Transport delivers the messages; nil means an in-process sink that
	// accepts everything at once. TransportName names it in the report.
	Transport     relayer.Transport
	TransportName string
	// Destination is the broker destination (subject, topic, exchange) the
	// run sends to. Default: "relayer.bench".
	Destination string
	// Producers is how many goroutines commit transactions, 1 to 64.
	// Default: 8.
	Producers int
	// Duration is how long each timed scenario runs. Default: 10s (Quick:
	// 1s).
	Duration time.Duration
	// Rounds is how many times each scenario variant runs, the contenders
	// alternating within a round; the median and the range are reported. 1
	// to 20. Default: 3 (Quick: 1).
	Rounds int
	// Contenders are measured beside the hand-written loop and Relayer's
	// dispatch paths, in the scenarios each runs.
	Contenders []Contender
	// Only, when set, limits the run to the contenders of these names (see
	// [Contender.Name]); the business insert alone of the enlist scenario
	// runs with the hand-written loop. Default: every contender.
	Only []string
	// Rate is the latency scenario's total messages per second, sent in
	// transactions of PerTx. Default: 2,000.
	Rate int
	// PerTx is how many messages each of the latency scenario's
	// transactions commits, 1 to 100. Default: 10.
	PerTx int
	// Backlog is the drain and bloat scenarios' pre-filled rows, 1 to
	// 10,000,000. Default: 200,000 (Quick: 5,000).
	Backlog int
	// OrderedBacklog is the ordered scenario's pre-filled rows, 1 to
	// 10,000,000. Default: 20,000 (Quick: 2,000).
	OrderedBacklog int
	// OrderedBatchSize is the ordered workers' rows per lane and batch in
	// the ordered and bloat scenarios (dispatch.OrderedOptions.BatchSize),
	// 0 to dispatch.BatchSizeMax. Default: 0, the workers' default.
	OrderedBatchSize int
	// BodySize is each message body's size in bytes, 16 to 1 MiB. Default:
	// 256.
	BodySize int
	// Progress, when set, is told which step runs, as it starts.
	Progress func(step string)
}

var schemaPattern = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

func (c Config) withDefaults() Config {
	if c.Schema == "" {
		c.Schema = fmt.Sprintf("relayer_bench_%d", os.Getpid())
	}
	if len(c.Scenarios) == 0 {
		c.Scenarios = Scenarios
	}
	if c.TransportName == "" {
		c.TransportName = "in-process"
	}
	if c.Destination == "" {
		c.Destination = "relayer.bench"
	}
	if c.Producers == 0 {
		c.Producers = 8
	}
	if c.Duration == 0 {
		c.Duration = 10 * time.Second
		if c.Quick {
			c.Duration = time.Second
		}
	}
	if c.Rate == 0 {
		c.Rate = 2000
	}
	if c.PerTx == 0 {
		c.PerTx = 10
	}
	if c.Rounds == 0 {
		c.Rounds = 3
		if c.Quick {
			c.Rounds = 1
		}
	}
	if c.Backlog == 0 {
		c.Backlog = 200_000
		if c.Quick {
			c.Backlog = 5000
		}
	}
	if c.OrderedBacklog == 0 {
		c.OrderedBacklog = 20_000
		if c.Quick {
			c.OrderedBacklog = 2000
		}
	}
	if c.BodySize == 0 {
		c.BodySize = 256
	}
	if c.Progress == nil {
		c.Progress = func(string) {}
	}
	return c
}

// Validate reports the first field out of range. It does not look at DB,
// which Run needs.
func (c Config) Validate() error {
	d := c.withDefaults()
	if err := d.checkLoad(c); err != nil {
		return err
	}
	if err := d.checkSizes(c); err != nil {
		return err
	}
	return d.checkNames()
}

// checkLoad checks the schema and the load's fields of c, the given
// config with its defaults (the given values are the ones reported).
func (c Config) checkLoad(given Config) error {
	switch {
	case !schemaPattern.MatchString(c.Schema) || len(c.Schema) > store.SchemaMaxLen:
		return fmt.Errorf("%w: Schema %q must match [a-z_][a-z0-9_]* and be at most %d bytes", ErrInvalidConfig, c.Schema, store.SchemaMaxLen)
	case c.Producers < 1 || c.Producers > 64:
		return fmt.Errorf("%w: Producers must be 1 to 64, got %d", ErrInvalidConfig, given.Producers)
	case c.Duration < 100*time.Millisecond:
		return fmt.Errorf("%w: Duration must be at least 100ms, got %s", ErrInvalidConfig, given.Duration)
	case c.Rounds < 1 || c.Rounds > 20:
		return fmt.Errorf("%w: Rounds must be 1 to 20, got %d", ErrInvalidConfig, given.Rounds)
	case c.Rate < 1 || c.Rate > 1_000_000:
		return fmt.Errorf("%w: Rate must be 1 to 1,000,000 msg/s, got %d", ErrInvalidConfig, given.Rate)
	case c.PerTx < 1 || c.PerTx > 100:
		return fmt.Errorf("%w: PerTx must be 1 to 100, got %d", ErrInvalidConfig, given.PerTx)
	}
	return nil
}

// checkSizes checks the backlogs', batches' and bodies' sizes, as checkLoad.
func (c Config) checkSizes(given Config) error {
	switch {
	case c.Backlog < 1 || c.Backlog > 10_000_000:
		return fmt.Errorf("%w: Backlog must be 1 to 10,000,000, got %d", ErrInvalidConfig, given.Backlog)
	case c.OrderedBacklog < 1 || c.OrderedBacklog > 10_000_000:
		return fmt.Errorf("%w: OrderedBacklog must be 1 to 10,000,000, got %d", ErrInvalidConfig, given.OrderedBacklog)
	case c.OrderedBatchSize < 0 || c.OrderedBatchSize > dispatch.BatchSizeMax:
		return fmt.Errorf("%w: OrderedBatchSize must be 0 to %d, got %d", ErrInvalidConfig, dispatch.BatchSizeMax, given.OrderedBatchSize)
	case c.BodySize < 16 || c.BodySize > 1<<20:
		return fmt.Errorf("%w: BodySize must be 16 to 1 MiB, got %d", ErrInvalidConfig, given.BodySize)
	}
	return nil
}

// checkNames checks that c names known contenders and scenarios.
func (c Config) checkNames() error {
	r := &runner{cfg: c}
	for _, name := range c.Only {
		known := false
		for _, s := range AllScenarios {
			known = known || slices.ContainsFunc(r.all(s), func(ct Contender) bool { return ct.Name() == name })
		}
		if !known {
			return fmt.Errorf("%w: unknown contender %q", ErrInvalidConfig, name)
		}
	}
	for _, s := range c.Scenarios {
		if !slices.Contains(AllScenarios, s) {
			return fmt.Errorf("%w: unknown scenario %q (want one of %v)", ErrInvalidConfig, s, AllScenarios)
		}
	}
	return nil
}

// Result is one measured variant of a scenario.
type Result struct {
	Scenario string `json:"scenario"`
	// Variant says what was measured, such as "10 per tx".
	Variant string `json:"variant"`
	// Contender names what was measured, such as "relayer direct" (empty
	// for the business insert alone).
	Contender string `json:"contender,omitempty"`
	// MsgsPerSec is the messages committed (enlist) or delivered per second.
	MsgsPerSec float64 `json:"msgs_per_sec,omitempty"`
	// TxPerSec is the transactions committed per second (enlist).
	TxPerSec float64 `json:"tx_per_sec,omitempty"`
	// Ratio is the enlist scenario's transactions per second against the
	// business insert alone.
	Ratio float64 `json:"ratio,omitempty"`
	// VsLoop is the headline figure (transactions per second for enlist,
	// messages delivered per second for e2e and drain) against the
	// hand-written loop's, medians over the rounds.
	VsLoop float64 `json:"vs_loop,omitempty"`
	// VsMinimal is the headline figure against the minimal loop's: the
	// database's limit for an outbox (see [Minimal]).
	VsMinimal float64 `json:"vs_minimal,omitempty"`
	// VsDirect is the ordered path's delivered messages per second against
	// direct dispatch's (e2e).
	VsDirect float64 `json:"vs_direct,omitempty"`
	// Rounds is how many times the variant ran. The figures are those of the
	// round with the median headline figure (TxPerSec for enlist, P99 for
	// latency, MsgsPerSec otherwise); the Min and Max fields give the range
	// over every round.
	Rounds        int           `json:"rounds,omitempty"`
	TxPerSecMin   float64       `json:"tx_per_sec_min,omitempty"`
	TxPerSecMax   float64       `json:"tx_per_sec_max,omitempty"`
	MsgsPerSecMin float64       `json:"msgs_per_sec_min,omitempty"`
	MsgsPerSecMax float64       `json:"msgs_per_sec_max,omitempty"`
	P99Min        time.Duration `json:"p99_min_ns,omitempty"`
	P99Max        time.Duration `json:"p99_max_ns,omitempty"`
	// CPU is the CPU spent per transaction committed (enlist) or per
	// message delivered (from the producers' start until the backlog
	// drained in e2e and latency, from the workers' start in drain,
	// ordered and bloat): this process's (the producers, the contender's
	// client code and workers, the garbage collector) and, when DBCPU is
	// set, the database server's too. It is the median over the rounds, as
	// are DBCPU and the range CPUMin to CPUMax. On a machine whose cores
	// the producers share with the database, it moves far less with the
	// machine's other work than throughput does.
	CPU    time.Duration `json:"cpu_ns,omitempty"`
	CPUMin time.Duration `json:"cpu_min_ns,omitempty"`
	CPUMax time.Duration `json:"cpu_max_ns,omitempty"`
	// DBCPU is the database server's share of CPU: its processes' CPU
	// time, read from /proc when the server runs on this machine; zero
	// when it does not (another host, a container, a system without
	// /proc). Whatever else the server runs meanwhile counts too.
	DBCPU time.Duration `json:"db_cpu_ns,omitempty"`
	// CPUVsMinimal is the minimal loop's CPU against this contender's, of
	// the same variant, when both include the database's: above 1, the
	// contender costs less than the minimal loop.
	CPUVsMinimal float64 `json:"cpu_vs_minimal,omitempty"`
	// Produced is the messages committed per second (e2e).
	Produced float64 `json:"produced_per_sec,omitempty"`
	// ServerTxPerMsg is the database's transactions (of every session, so
	// run on a database nothing else uses) per message produced during the
	// timed part (e2e, latency): the producers' own and the dispatchers'.
	ServerTxPerMsg float64 `json:"server_tx_per_msg,omitempty"`
	// Backlog is the rows left in the outbox when the timed part ended.
	Backlog int64 `json:"backlog"`
	// P50, P95 and P99 are commit-to-send latencies.
	P50 time.Duration `json:"p50_ns,omitempty"`
	P95 time.Duration `json:"p95_ns,omitempty"`
	P99 time.Duration `json:"p99_ns,omitempty"`
	// LongestPause is the longest time without a delivery while a
	// committed message waited for one (e2e, latency): how long dispatch
	// stalled at worst. A stall of the producers' commits does not count,
	// since no message waited, nor does one in the first second, while
	// connections open. LongestPauseAt is when it ended, from the first
	// commit. The median round's, with LongestPauseMax the longest of
	// every round.
	LongestPause    time.Duration `json:"longest_pause_ns,omitempty"`
	LongestPauseAt  time.Duration `json:"longest_pause_at_ns,omitempty"`
	LongestPauseMax time.Duration `json:"longest_pause_max_ns,omitempty"`
	// Lost, Duplicates and OutOfOrder count committed messages never
	// delivered, deliveries beyond the first, and first deliveries of a key
	// that came before an earlier message of that key, over every round.
	Lost       int `json:"lost"`
	Duplicates int `json:"duplicates"`
	OutOfOrder int `json:"out_of_order"`
	// Elapsed is the scenario variant's measured time.
	Elapsed time.Duration `json:"elapsed_ns"`
}

// Run runs cfg's scenarios in order and returns their results. It creates
// the schema first and drops it at the end unless cfg.Keep is set. ctx
// cancels the run.
func Run(ctx context.Context, cfg Config) (results []Result, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.DB == nil {
		return nil, fmt.Errorf("%w: DB is nil", ErrInvalidConfig)
	}
	cfg = cfg.withDefaults()
	r := &runner{cfg: cfg, cpu: newCPUMeter(ctx, cfg.DB)}
	if err := r.createSchema(ctx); err != nil {
		return nil, err
	}
	if !cfg.Keep {
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if _, derr := cfg.DB.ExecContext(cctx, `DROP SCHEMA `+r.schema()+` CASCADE`); derr != nil {
				err = errors.Join(err, fmt.Errorf("bench: drop schema %s: %w", cfg.Schema, derr))
			}
		}()
	}
	steps := map[string]func(context.Context) ([]Result, error){
		ScenarioEnlist: r.enlist, ScenarioE2E: r.endToEnd, ScenarioLatency: r.latency,
		ScenarioDrain: r.drain, ScenarioOrdered: r.ordered, ScenarioBloat: r.bloat,
	}
	for _, s := range AllScenarios {
		if !slices.Contains(cfg.Scenarios, s) {
			continue
		}
		res, err := steps[s](ctx)
		results = append(results, res...)
		if err != nil {
			return results, fmt.Errorf("bench: %s: %w", s, err)
		}
	}
	return results, nil
}

// runner is one Run's state.
type runner struct {
	cfg  Config
	next int // the next table prefix number
	cpu  cpuMeter
}

func (r *runner) schema() string { return pgx.Identifier{r.cfg.Schema}.Sanitize() }

func (r *runner) createSchema(ctx context.Context) error {
	var exists bool
	if err := r.cfg.DB.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, r.cfg.Schema).Scan(&exists); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if exists {
		return fmt.Errorf("%w: schema %q exists; name a new one, or drop it", ErrInvalidConfig, r.cfg.Schema)
	}
	_, err := r.cfg.DB.ExecContext(ctx, `CREATE SCHEMA `+r.schema())
	return err
}

// quoteTable is the quoted, qualified name of table in schema.
func quoteTable(schema, table string) string { return pgx.Identifier{schema, table}.Sanitize() }
