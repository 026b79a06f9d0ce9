// Command scheduler is a small custom scheduler for a spot job: it runs the
// job as a child process on one of several (simulated) clouds, watches the
// job's notices and checkpoint events, and when the job is interrupted
// decides whether to restart it on the same cloud or move it to another:
//
//	go run ./examples/scheduler
//
// Its policy prefers the cloud with the longest interruption notice (more
// time to save a large state), discounted by the interruptions it has seen
// there: score = notice / (1 + interruptions). Every cloud is a noticetest
// fake metadata server in this process; the checkpoint store is a directory
// all of them share, as an object store would be.
//
// The job is this same program re-executed as a worker (a training-like
// loop under spot.Run) that writes every spot.Event to its standard output
// as a JSON line; that stream is how the scheduler sees notices and
// checkpoints as they happen.
//
// Flags:
//
//	-steps N            job length (default 1500)
//	-step-time D        time per step (default 1ms)
//	-interrupt CLOUD=D  clouds that interrupt every run after D
//	                    (default alibaba=300ms,gcp=200ms)
//	-dir DIR            checkpoint store directory (default: a temporary one)
//	-v                  show the job's own log
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spotsafe/spotsafe/checkpoint"
	_ "github.com/spotsafe/spotsafe/checkpoint/filestore"
	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/notice/noticetest"
	"github.com/spotsafe/spotsafe/spot"
)

const (
	roleEnv    = "SPOTSAFE_SCHEDULER_ROLE"
	roleWorker = "worker"
	maxRuns    = 10
)

func main() {
	if os.Getenv(roleEnv) == roleWorker {
		os.Exit(workerMain(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(schedulerMain(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// wireEvent is a spot.Event as the worker sends it.
type wireEvent struct {
	spot.Event
	Error string `json:"error,omitempty"`
}

// workerMain is the job: a loop over a deterministic state under spot.Run,
// streaming its events as JSON lines to stdout.
func workerMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	provider := fs.String("provider", "", "cloud")
	endpoint := fs.String("endpoint", "", "metadata endpoint")
	store := fs.String("store", "", "checkpoint store URL")
	steps := fs.Int64("steps", 1500, "steps")
	stepTime := fs.Duration("step-time", time.Millisecond, "time per step")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	enc := json.NewEncoder(stdout)
	err := spot.Run(ctx, func(ctx context.Context, job *spot.Job) error {
		state := make([]byte, 64<<10) // the "model"
		step := int64(0)
		if r := job.Restored(); r != nil {
			b, err := r.ReadPart(ctx, "state")
			if err != nil {
				return err
			}
			copy(state, b)
			step = r.Step
		}
		job.SetSnapshot(func(int64) ([]checkpoint.Part, error) {
			return []checkpoint.Part{checkpoint.Bytes("state", state)}, nil
		})
		for ; step < *steps; step++ {
			if err := job.Step(ctx, step); err != nil {
				return err
			}
			x := binary.LittleEndian.Uint64(state[(step%8192)*8:])
			binary.LittleEndian.PutUint64(state[(step%8192)*8:], x*6364136223846793005+uint64(step))
			time.Sleep(*stepTime)
		}
		return job.Checkpoint(ctx, *steps)
	}, &spot.Options{
		StoreURL: *store, Provider: *provider, Endpoint: *endpoint, PollInterval: 50 * time.Millisecond,
		Interval: 250 * time.Millisecond,
		Logger:   slog.New(slog.NewTextHandler(stderr, nil)),
		OnEvent: func(e spot.Event) {
			w := wireEvent{Event: e}
			if e.Err != nil {
				w.Error = e.Err.Error()
			}
			_ = enc.Encode(w) // one goroutine calls OnEvent: no interleaving
		},
	})
	return spot.ExitCode(err)
}

// cloud is one simulated provider.
type cloud struct {
	name          string
	kind          notice.Kind
	lead          time.Duration // nominal notice
	fake          noticetest.Fake
	interruptions int
	interruptAt   time.Duration // 0: never interrupts in this simulation
}

// score is the policy: longer notices are better, interruptions seen count
// against a cloud.
func (c *cloud) score() float64 { return c.lead.Seconds() / float64(1+c.interruptions) }

type config struct {
	steps     int64
	stepTime  time.Duration
	interrupt map[string]time.Duration
	dir       string
	verbose   bool
}

func parse(args []string, stderr io.Writer) (*config, error) {
	c := &config{interrupt: map[string]time.Duration{}}
	fs := flag.NewFlagSet("scheduler", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Int64Var(&c.steps, "steps", 1500, "job length in steps")
	fs.DurationVar(&c.stepTime, "step-time", time.Millisecond, "time per step")
	interrupt := fs.String("interrupt", "alibaba=300ms,gcp=200ms", "CLOUD=DURATION,... clouds that interrupt every run after DURATION")
	fs.StringVar(&c.dir, "dir", "", "checkpoint store directory (default: a temporary one)")
	fs.BoolVar(&c.verbose, "v", false, "show the job's own log")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.steps <= 0 {
		return nil, fmt.Errorf("-steps must be positive, got %d", c.steps)
	}
	for item := range strings.SplitSeq(*interrupt, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		name, d, ok := strings.Cut(item, "=")
		dur, err := time.ParseDuration(d)
		if !ok || err != nil || dur <= 0 || !slices.Contains(noticetest.Providers(), name) {
			return nil, fmt.Errorf("-interrupt %q: want CLOUD=DURATION with CLOUD one of %s", item, strings.Join(noticetest.Providers(), ", "))
		}
		c.interrupt[name] = dur
	}
	return c, nil
}

func schedulerMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parse(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "scheduler:", err)
		return 2
	}
	if err := schedule(ctx, c, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "scheduler:", err)
		return 1
	}
	return 0
}

func schedule(ctx context.Context, c *config, stdout, stderr io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	dir := c.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "spotsafe-scheduler-*"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	var clouds []*cloud
	for _, name := range noticetest.Providers() {
		kind := notice.KindTerminate
		if name == "gcp" || name == "azure" {
			kind = notice.KindPreempt
		}
		f, err := noticetest.New(name, nil)
		if err != nil {
			return err
		}
		defer f.Close()
		clouds = append(clouds, &cloud{name: name, kind: kind, lead: noticetest.NominalNotice(name, kind), fake: f, interruptAt: c.interrupt[name]})
	}
	start := time.Now()
	say := func(format string, a ...any) {
		fmt.Fprintf(stdout, "[%5.2fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, a...))
	}
	best := func() *cloud {
		return slices.MaxFunc(clouds, func(a, b *cloud) int {
			if d := a.score() - b.score(); d != 0 {
				if d > 0 {
					return 1
				}
				return -1
			}
			return strings.Compare(b.name, a.name) // ties: alphabetical
		})
	}
	var names []string
	for _, cl := range clouds {
		names = append(names, fmt.Sprintf("%s %v", cl.name, cl.lead))
	}
	say("job of %d steps; clouds and their notice: %s; policy: score = notice / (1 + interruptions seen)", c.steps, strings.Join(names, ", "))

	store := "file://" + dir
	cur := best()
	say("place the job on %s (score %.0f)", cur.name, cur.score())
	// reached is the step committed when the previous run was
	// interrupted; a restore of an older step means work is redone.
	lastCommitted, redone, reached := int64(-1), int64(0), int64(0)
	for run := 1; run <= maxRuns; run++ {
		if cur.interruptAt > 0 {
			appear := time.Now().Add(cur.interruptAt)
			cur.fake.Schedule(cur.kind, appear, appear.Add(cur.lead))
		}
		cmd := exec.CommandContext(ctx, exe, "-provider", cur.name, "-endpoint", cur.fake.URL(), "-store", store,
			"-steps", fmt.Sprint(c.steps), "-step-time", c.stepTime.String())
		cmd.Env = append(os.Environ(), roleEnv+"="+roleWorker)
		cmd.Stderr = io.Discard
		if c.verbose {
			cmd.Stderr = stderr
		}
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		cmd.WaitDelay = time.Minute
		events, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		sc := bufio.NewScanner(events)
		for sc.Scan() {
			var e wireEvent
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				say("%s: unreadable event %q: %v", cur.name, sc.Text(), err)
				continue
			}
			switch e.Kind {
			case spot.EventRestored:
				say("%s: job restored step %d in %v", cur.name, e.Step, e.Duration.Round(time.Microsecond))
				redone += max(reached-e.Step, 0)
			case spot.EventNotice:
				if e.Urgent {
					say("%s: %s notice, %v left: the job saves and stops; pick where it goes next", cur.name, e.Notice.Kind, e.Remaining.Round(time.Second))
				} else {
					say("%s: advisory %s notice: the job takes an early checkpoint", cur.name, e.Notice.Kind)
				}
			case spot.EventCheckpointCommitted:
				lastCommitted = e.Step
				if e.Reason == spot.ReasonEmergency {
					say("%s: emergency checkpoint of step %d committed", cur.name, e.Step)
				}
			case spot.EventWillNotFit:
				say("%s: the full state will not fit before the deadline (estimate %v, %v left)", cur.name, e.Estimate, e.Remaining)
			case spot.EventInterrupted:
				reached = e.Step
			}
		}
		werr := cmd.Wait()
		code := cmd.ProcessState.ExitCode()
		var ee *exec.ExitError
		if werr != nil && !errors.As(werr, &ee) {
			return werr
		}
		cur.fake.Clear()
		switch code {
		case spot.ExitFinished:
			say("job finished on %s at step %d after %d run(s); %d steps redone after restarts", cur.name, lastCommitted, run, redone)
			return nil
		case spot.ExitInterrupted, spot.ExitSaveFailed:
			cur.interruptions++
			if code == spot.ExitSaveFailed {
				say("job exited %d on %s: emergency checkpoint failed; it resumes from step %d", code, cur.name, lastCommitted)
			} else {
				say("job exited %d on %s: interrupted, checkpoint of step %d committed", code, cur.name, lastCommitted)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			next := best()
			if next == cur {
				say("decision: restart on %s (score %.0f is still the best)", cur.name, cur.score())
			} else {
				say("decision: move from %s (score %.0f) to %s (score %.0f)", cur.name, cur.score(), next.name, next.score())
			}
			cur = next
		default:
			return fmt.Errorf("job failed on %s with exit code %d", cur.name, code)
		}
	}
	return fmt.Errorf("job did not finish in %d runs", maxRuns)
}
