// Command train is a training job that survives spot interruptions, and a
// demo of the whole cycle in one command:
//
//	go run ./examples/train
//
// It trains a linear model with SGD (pure Go, see model.go), receives a
// simulated AWS spot interruption notice from an in-process fake metadata
// server, commits an emergency checkpoint, exits with code 75 as a real
// instance's job would, restarts itself as a fresh process (as Kubernetes,
// Slurm or systemd would), restores, finishes, and checks that no step was
// lost and that the final loss is bit for bit the loss of an uninterrupted
// run computed in the same process.
//
// Flags:
//
//	-store URL             checkpoint store (default file://./spotsafe-demo)
//	-steps N               training steps (default 4000, about 2 s)
//	-simulate PROVIDER     aws, gcp, azure, alibaba, tencent, or none (default aws);
//	                       none runs the job once, for real: the cloud is
//	                       detected and SIGTERM/SIGINT are the notices
//	-interrupt-after D     when the simulated notice appears (default 1s)
//	-interval D            periodic checkpoint interval (default 500ms)
//	-keep                  keep the checkpoints already in the store and
//	                       resume from them (default: start afresh)
//	-step-time D           make each step last at least D, as a bigger
//	                       model's would (default 500µs)
//	-dim, -batch, -seed    the model's size, minibatch and seed
//
// The demo stores its checkpoints under the prefix "train-demo" of the
// store and, unless -keep is given, deletes what is under that prefix first.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spotsafe/spotsafe/checkpoint"
	_ "github.com/spotsafe/spotsafe/checkpoint/filestore"
	_ "github.com/spotsafe/spotsafe/checkpoint/memstore"
	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/notice/noticetest"
	"github.com/spotsafe/spotsafe/spot"
)

// roleEnv marks the child process that does the training.
const (
	roleEnv    = "SPOTSAFE_DEMO_ROLE"
	roleWorker = "worker"
	prefix     = "train-demo"
	maxRuns    = 5
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if os.Getenv(roleEnv) == roleWorker {
		stop() // the worker's spot.Run owns the signals
		os.Exit(workerMain(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(demoMain(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// config is what both roles need.
type config struct {
	store          string
	steps          int64
	simulate       string
	interruptAfter time.Duration
	interval       time.Duration
	keep           bool
	stepTime       time.Duration
	dim, batch     int
	seed           uint64
	// Worker only.
	endpoint string
	result   string
	run      int
}

func parse(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.store, "store", "file://./spotsafe-demo", "checkpoint store URL")
	fs.Int64Var(&c.steps, "steps", 4000, "training steps")
	fs.StringVar(&c.simulate, "simulate", "aws", "provider to simulate (aws, gcp, azure, alibaba, tencent) or none")
	fs.DurationVar(&c.interruptAfter, "interrupt-after", time.Second, "when the simulated notice appears")
	fs.DurationVar(&c.interval, "interval", 500*time.Millisecond, "periodic checkpoint interval")
	fs.BoolVar(&c.keep, "keep", false, "keep existing checkpoints and resume from them")
	fs.DurationVar(&c.stepTime, "step-time", 500*time.Microsecond, "minimum duration of a step (simulates a bigger model)")
	fs.IntVar(&c.dim, "dim", 2048, "model parameters")
	fs.IntVar(&c.batch, "batch", 32, "minibatch size")
	fs.Uint64Var(&c.seed, "seed", 1, "data and sampling seed")
	fs.StringVar(&c.endpoint, "endpoint", "", "metadata endpoint (worker; set by the demo)")
	fs.StringVar(&c.result, "result", "", "file for the worker's result (set by the demo)")
	fs.IntVar(&c.run, "run", 1, "run number (worker; set by the demo)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	case c.steps <= 0:
		return nil, fmt.Errorf("-steps must be positive, got %d", c.steps)
	case c.dim <= 0 || c.batch <= 0:
		return nil, errors.New("-dim and -batch must be positive")
	case c.interruptAfter < 0:
		return nil, errors.New("-interrupt-after must not be negative")
	case c.simulate != "none" && !isProvider(c.simulate):
		return nil, fmt.Errorf("-simulate %q: want one of %s, or none", c.simulate, strings.Join(noticetest.Providers(), ", "))
	}
	return c, nil
}

func isProvider(p string) bool {
	for _, n := range noticetest.Providers() {
		if n == p {
			return true
		}
	}
	return false
}

// result is what a worker run reports to the demo.
type result struct {
	Run            int           `json:"run"`
	ExitCode       int           `json:"exit_code"`
	Err            string        `json:"err,omitempty"`
	Restored       int64         `json:"restored"` // -1: fresh start
	RestoreTime    time.Duration `json:"restore_time"`
	RestoredBytes  int64         `json:"restored_bytes"`
	Reached        int64         `json:"reached"` // the step the work stopped at
	Committed      int64         `json:"committed"`
	Reduced        bool          `json:"reduced"`
	Notice         string        `json:"notice,omitempty"`
	NoticeLead     time.Duration `json:"notice_lead"`
	NoticeToCommit time.Duration `json:"notice_to_commit"`
	Checkpoints    int           `json:"checkpoints"`
	Loss           float64       `json:"loss"`
}

// workerMain runs the training job once under spot.Run and returns its
// exit code.
func workerMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parse(args, stderr)
	if err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("run", c.run)
	res := train(ctx, c, log)
	if c.result != "" {
		b, _ := json.Marshal(res)
		if err := os.WriteFile(c.result, b, 0o644); err != nil {
			fmt.Fprintln(stderr, "train:", err)
			return spot.ExitFailed
		}
	} else {
		fmt.Fprintf(stdout, "run ended: exit code %d, step %d, loss %.12g\n", res.ExitCode, res.Reached, res.Loss)
	}
	return res.ExitCode
}

// train is the job: what a user's program looks like.
func train(ctx context.Context, c *config, log *slog.Logger) result {
	res := result{Run: c.run, Restored: -1, Committed: -1}
	tr := newTrainer(c.dim, c.batch, c.seed)
	opts := &spot.Options{
		StoreURL:     c.store,
		Manager:      &checkpoint.ManagerOptions{Prefix: prefix},
		Provider:     c.simulate,
		Endpoint:     c.endpoint,
		PollInterval: 100 * time.Millisecond,
		Interval:     c.interval,
		Logger:       log,
		OnEvent: func(e spot.Event) {
			if e.Kind == spot.EventCheckpointCommitted {
				res.Checkpoints++
			}
		},
	}
	if c.simulate == "none" {
		opts.Provider = spot.ProviderAuto
	}
	err := spot.Run(ctx, func(ctx context.Context, job *spot.Job) error {
		step := int64(0)
		if r := job.Restored(); r != nil {
			if err := restore(ctx, tr, r); err != nil {
				return err
			}
			step = r.Step
			res.Restored, res.RestoreTime, res.RestoredBytes = r.Step, r.Duration, r.Manifest.Bytes()
		}
		job.SetSnapshot(func(int64) ([]checkpoint.Part, error) {
			return []checkpoint.Part{
				checkpoint.Bytes(partParams, floats(tr.w)),
				checkpoint.Bytes(partOptimizer, floats(tr.v)),
				checkpoint.Bytes(partRNG, tr.rngState()),
				checkpoint.Bytes(partData, tr.dataState()),
			}, nil
		})
		// If the full state would not commit before the deadline: the
		// weights and the data position, without the optimizer's momentum.
		job.SetSmallSnapshot(func(int64) ([]checkpoint.Part, error) {
			return []checkpoint.Part{
				checkpoint.Bytes(partParams, floats(tr.w)),
				checkpoint.Bytes(partRNG, tr.rngState()),
				checkpoint.Bytes(partData, tr.dataState()),
			}, nil
		})
		paceStart, paced := time.Now(), 0
		for ; step < c.steps; step++ {
			res.Reached = step
			if err := job.Step(ctx, step); err != nil {
				return err
			}
			tr.step()
			if c.stepTime > 0 {
				paced++
				time.Sleep(time.Until(paceStart.Add(time.Duration(paced) * c.stepTime)))
			}
		}
		res.Reached = c.steps
		return job.Checkpoint(ctx, c.steps)
	}, opts)

	res.ExitCode = spot.ExitCode(err)
	res.Loss = tr.loss()
	if err != nil {
		res.Err = err.Error()
	}
	var ie *spot.InterruptedError
	if errors.As(err, &ie) {
		res.Committed, res.Reduced, res.NoticeToCommit = ie.Step, ie.Reduced, ie.NoticeToCommit
		res.Notice = fmt.Sprintf("%s %s", ie.Notice.Provider, ie.Notice.Kind)
		res.NoticeLead = ie.Notice.Deadline.Sub(ie.Notice.Observed)
	} else if err == nil {
		res.Committed = c.steps
	}
	return res
}

// restore loads the trainer from a checkpoint; a reduced one lacks the
// optimizer state, which then comes from its base or starts at zero.
func restore(ctx context.Context, tr *trainer, r *spot.Restored) error {
	parts := make(map[string][]byte)
	for _, name := range r.PartNames() {
		b, err := r.ReadPart(ctx, name)
		if err != nil {
			return err
		}
		parts[name] = b
	}
	if _, ok := parts[partOptimizer]; !ok && r.Reduced {
		parts[partOptimizer] = make([]byte, 8*tr.dim)
		if r.Base != nil {
			if b, err := r.Base.ReadPart(ctx, partOptimizer); err == nil {
				parts[partOptimizer] = b
			}
		}
	}
	return tr.load(parts)
}

// demoMain is the supervisor: it simulates the cloud and restarts the
// worker as a scheduler would.
func demoMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parse(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "train:", err)
		return 2
	}
	if c.simulate == "none" {
		c.result = ""
		return workerMain(ctx, args, stdout, stderr)
	}
	ok, err := demo(ctx, c, stdout, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "train:", err)
		return 1
	}
	if !ok {
		return 1
	}
	return 0
}

// demo runs the whole cycle and reports whether it met its promises: no
// step lost, and the final loss of an uninterrupted run.
func demo(ctx context.Context, c *config, stdout, stderr io.Writer) (bool, error) {
	exe, err := os.Executable()
	if err != nil {
		return false, err
	}
	if !c.keep {
		if err := clearPrefix(ctx, c.store); err != nil {
			return false, err
		}
	}
	tmp, err := os.MkdirTemp("", "spotsafe-demo-*")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(tmp)

	// The reference: the same training, uninterrupted, in this process.
	refDone := make(chan float64, 1)
	go func() {
		ref := newTrainer(c.dim, c.batch, c.seed)
		for range c.steps {
			ref.step()
		}
		refDone <- ref.loss()
	}()

	fake, err := noticetest.New(c.simulate, nil)
	if err != nil {
		return false, err
	}
	defer fake.Close()
	kind := notice.KindTerminate
	if c.simulate == "gcp" || c.simulate == "azure" {
		kind = notice.KindPreempt
	}
	lead := noticetest.NominalNotice(c.simulate, kind)
	fmt.Fprintf(stdout, "spotsafe demo: %d SGD steps of a %d-parameter model, checkpoints in %s (prefix %s) every %v\n",
		c.steps, c.dim, c.store, prefix, c.interval)
	fmt.Fprintf(stdout, "simulated %s metadata server at %s: a %s notice (%v warning) will appear %v after the job starts\n",
		c.simulate, fake.URL(), kind, lead, c.interruptAfter)

	var runs []result
	for run := 1; run <= maxRuns; run++ {
		if run == 1 {
			appear := time.Now().Add(c.interruptAfter)
			fake.Schedule(kind, appear, appear.Add(lead))
		}
		resFile := filepath.Join(tmp, fmt.Sprintf("run-%d.json", run))
		cmd := exec.CommandContext(ctx, exe, "-store", c.store, "-steps", fmt.Sprint(c.steps), "-simulate", c.simulate,
			"-interval", c.interval.String(), "-step-time", c.stepTime.String(), "-dim", fmt.Sprint(c.dim), "-batch", fmt.Sprint(c.batch),
			"-seed", fmt.Sprint(c.seed), "-endpoint", fake.URL(), "-result", resFile, "-run", fmt.Sprint(run))
		cmd.Env = append(os.Environ(), roleEnv+"="+roleWorker)
		cmd.Stdout, cmd.Stderr = stderr, stderr
		// The worker gets Ctrl-C through the terminal's process group;
		// it saves and exits 75, and the demo does not restart it.
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		cmd.WaitDelay = time.Minute
		fmt.Fprintf(stdout, "run %d: starting %s\n", run, filepath.Base(exe))
		err := cmd.Run()
		code := cmd.ProcessState.ExitCode()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			return false, fmt.Errorf("run %d: %w", run, err)
		}
		b, rerr := os.ReadFile(resFile)
		var res result
		if rerr == nil {
			rerr = json.Unmarshal(b, &res)
		}
		if rerr != nil {
			return false, fmt.Errorf("run %d exited with code %d without a result: %w", run, code, rerr)
		}
		runs = append(runs, res)
		switch code {
		case spot.ExitFinished:
			fmt.Fprintf(stdout, "run %d: finished (exit code 0)\n", run)
		case spot.ExitInterrupted, spot.ExitSaveFailed:
			what := "interrupted, checkpoint committed"
			if code == spot.ExitSaveFailed {
				what = "interrupted, emergency checkpoint failed"
			}
			fmt.Fprintf(stdout, "run %d: exit code %d (%s); a scheduler restarts it on a new instance\n", run, code, what)
			fake.Clear() // the new instance has no notice
			if ctx.Err() != nil {
				fmt.Fprintln(stdout, "stopped by a signal: not restarting")
				return false, nil
			}
			continue
		default:
			return false, fmt.Errorf("run %d failed with exit code %d: %s", run, code, res.Err)
		}
		break
	}
	return summarize(stdout, runs, <-refDone), nil
}

// summarize prints what happened and checks the promises.
func summarize(w io.Writer, runs []result, refLoss float64) bool {
	last := runs[len(runs)-1]
	fmt.Fprintln(w, "\nsummary")
	lost := int64(0)
	for i, r := range runs[:len(runs)-1] {
		next := runs[i+1]
		lost += r.Reached - next.Restored
		reduced := ""
		if r.Reduced {
			reduced = " (reduced state: the full one would not fit)"
		}
		fmt.Fprintf(w, "  run %d: %s notice (%v warning) at step %d; emergency checkpoint of step %d committed %v after the notice%s\n",
			r.Run, r.Notice, r.NoticeLead, r.Reached, r.Committed, r.NoticeToCommit.Round(time.Microsecond), reduced)
		fmt.Fprintf(w, "  run %d: restored step %d (%d bytes) in %v\n", next.Run, next.Restored, next.RestoredBytes, next.RestoreTime.Round(time.Microsecond))
	}
	if len(runs) == 1 {
		fmt.Fprintln(w, "  the job finished before the notice appeared: give it more -steps or a shorter -interrupt-after")
	}
	same := math.Float64bits(last.Loss) == math.Float64bits(refLoss)
	fmt.Fprintf(w, "  steps lost:          %d\n", lost)
	fmt.Fprintf(w, "  final loss:          %.17g\n", last.Loss)
	fmt.Fprintf(w, "  uninterrupted run:   %.17g (bit-identical: %v)\n", refLoss, same)
	if last.ExitCode != spot.ExitFinished {
		fmt.Fprintf(w, "  the job did not finish after %d runs\n", len(runs))
		return false
	}
	return lost == 0 && same
}

// clearPrefix deletes the demo's earlier checkpoints (only under its
// prefix, never anything else in the store).
func clearPrefix(ctx context.Context, url string) error {
	s, err := checkpoint.Open(ctx, url)
	if err != nil {
		return err
	}
	if cl, ok := s.(io.Closer); ok {
		defer cl.Close()
	}
	objs, err := s.List(ctx, prefix+"/")
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := s.Delete(ctx, o.Key); err != nil {
			return err
		}
	}
	return nil
}
