// Command spotsafe is the operator's tool: check from inside a container that
// interruption notices get through (watch), simulate a cloud's metadata server
// (fake), and inspect, verify, restore and prune checkpoints (ls, verify,
// restore, prune).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// command is one subcommand. run gets the arguments after the subcommand's
// name and returns an error; an exitError sets a specific exit code.
type command struct {
	name, usage, summary string
	run                  func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"watch", "watch [--provider auto|aws|gcp|azure|alibaba|tencent] [--endpoint URL] [--for DURATION] [--json]", "print interruption notices as they arrive", runWatch},
		{"fake", "fake PROVIDER [--listen ADDR] [--interrupt-in DURATION] [--kind KIND]", "serve a fake metadata server with a simulated interruption", runFake},
		{"ls", "ls URL [--json]", "list checkpoints with their status", runLs},
		{"verify", "verify URL [--step N]", "verify committed checkpoints; non-zero exit on corruption", runVerify},
		{"restore", "restore URL DIR [--step N]", "restore the newest valid checkpoint (or one step) into DIR", runRestore},
		{"prune", "prune URL --keep N", "delete all but the newest N checkpoints", runPrune},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// exitError carries a specific exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		}
		fmt.Fprintf(stderr, "spotsafe %s: %v\n", c.name, err)
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "usage: spotsafe %s\n", c.usage)
			return 2
		}
		return 1
	}
	fmt.Fprintf(stderr, "spotsafe: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

// usageError marks bad arguments (exit 2, with the usage line).
type usageError string

func (e usageError) Error() string { return string(e) }

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: spotsafe COMMAND [flags]")
	fmt.Fprintln(w)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n           spotsafe %s\n", c.name, c.summary, c.usage)
	}
}

// parseInterspersed parses flags that may come before, between or after
// positional arguments ("ls URL --json" and "ls --json URL" both work).
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
