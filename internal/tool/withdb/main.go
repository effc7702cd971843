package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/relayer-go/relayer/internal/tool/pgcluster"
)

// envURL is the variable read by package testdb (testdb.EnvURL, not imported
// here to keep the test-only drivers out of this command).
const envURL = "RELAYER_TEST_DATABASE_URL"

const startTimeout = 15 * time.Minute // includes installing PostgreSQL

func main() {
	os.Exit(run(os.Args[1:]))
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "withdb: "+format+"\n", args...)
}

func run(args []string) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		fmt.Fprintf(os.Stderr, "usage: withdb [--] command [argument...]\n"+
			"Runs the command with %s set, starting a throwaway PostgreSQL cluster unless it is already set.\n", envURL)
		return 2
	}

	// Catch the signals from the start, so that an interrupted start-up
	// still cleans up.
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(signals)

	env := os.Environ()
	if os.Getenv(envURL) == "" {
		cluster, code, ok := startCluster(signals)
		if !ok {
			return code
		}
		if cluster != nil {
			defer func() {
				if err := cluster.Stop(); err != nil {
					logf("%v", err)
				}
			}()
			env = append(env, envURL+"="+cluster.URL())
		}
	}
	return runChild(args, env, signals)
}

// startCluster starts the throwaway cluster. Without one it returns a nil
// cluster and ok, to run the command anyway, or, in CI or after a signal, the
// exit code and not ok.
func startCluster(signals <-chan os.Signal) (c *pgcluster.Cluster, code int, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	started := make(chan struct{})
	caught := make(chan os.Signal, 1)
	go func() {
		select {
		case sig := <-signals:
			cancel()
			caught <- sig
		case <-started:
			caught <- nil
		}
	}()
	c, err := pgcluster.Start(ctx, pgcluster.Options{Install: true, Logf: logf})
	close(started)
	if sig := <-caught; sig != nil {
		logf("interrupted by %v", sig)
		if stopErr := c.Stop(); stopErr != nil {
			logf("%v", stopErr)
		}
		return nil, 128 + signalNumber(sig), false
	}
	if err == nil {
		return c, 0, true
	}
	logf("no test database: %s is not set, and starting a throwaway PostgreSQL cluster failed: %v", envURL, err)
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		logf("failing because CI=true")
		return nil, 1, false
	}
	logf("running the command anyway; integration tests will be skipped")
	return nil, 0, true
}

// runChild runs the command, passing signals on to it, and returns its exit
// code.
func runChild(args, env []string, signals <-chan os.Signal) int {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		logf("%v", err)
		return 127
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case sig := <-signals:
			_ = cmd.Process.Signal(sig)
		case err := <-done:
			return exitCode(cmd, err)
		}
	}
}

// exitCode turns the command's end into an exit code, the way shells do.
func exitCode(cmd *exec.Cmd, err error) int {
	state := cmd.ProcessState
	if state == nil {
		logf("%v", err)
		return 1
	}
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return state.ExitCode()
}

func signalNumber(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return int(s)
	}
	return 1
}
