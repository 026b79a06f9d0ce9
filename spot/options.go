package spot

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/notice"
)

// Defaults for zero [Options] fields.
const (
	// DefaultStoreURL is where checkpoints go when neither Options.Store
	// nor Options.StoreURL is set: a directory in the working directory.
	DefaultStoreURL = "file://./spotsafe-checkpoints"
	// DefaultInterval is the periodic checkpoint interval: what most
	// training jobs use today.
	DefaultInterval = 15 * time.Minute
	// DefaultMTBI is the prior mean time between interruptions for the
	// adaptive interval, before this job has observed any. Spot capacity
	// is commonly interrupted every few hours to days; six hours errs on
	// the side of checkpointing more.
	DefaultMTBI = 6 * time.Hour
	// DefaultMargin is kept free before a notice's deadline: the emergency
	// checkpoint must have committed by Deadline − Margin.
	DefaultMargin = 5 * time.Second
	// DefaultHorizon is how close a final notice's deadline must be for
	// the runner to stop the work. A final notice further ahead (an AWS
	// scheduled stop days away) only triggers an early checkpoint until
	// its deadline comes within the horizon.
	DefaultHorizon = 10 * time.Minute
)

// Provider values for [Options.Provider] besides a provider name.
const (
	// ProviderAuto detects the cloud with providers.Detect (the default).
	ProviderAuto = "auto"
	// ProviderNone watches no cloud: signals only.
	ProviderNone = "none"
)

// Options configures [Run]. The zero value is usable: checkpoints go to
// ./spotsafe-checkpoints every 15 minutes, the cloud is detected, and
// SIGTERM/SIGINT count as a notice with a 30 s grace period. The worker must
// still say how to snapshot its state, here or with [Job.SetSnapshot].
type Options struct {
	// Store is where checkpoints go. It wins over StoreURL; Run does not
	// close it.
	Store checkpoint.Store
	// StoreURL opens the store with checkpoint.Open. file:// works as is;
	// for mem://, s3://, gs:// and oss:// import the store package (for
	// its side effect). Default [DefaultStoreURL]. Run closes a store it
	// opened.
	StoreURL string
	// Manager configures the checkpoint manager (prefix, retention,
	// concurrency, retries). Its OnEvent is still called; its Busy policy
	// is overridden per save by the runner.
	Manager *checkpoint.ManagerOptions

	// Provider selects the cloud to watch: "" or [ProviderAuto] to detect
	// it, [ProviderNone] for none, or a name from providers.Names ("aws",
	// "gcp", "azure", "alibaba", "tencent").
	Provider string
	// Endpoint overrides the metadata base URL (a fake, or a local proxy).
	Endpoint string
	// Sources, when not nil, replaces the cloud source that Provider
	// selects (signals are still added unless NoSignals). For tests and
	// custom notice sources.
	Sources []notice.Source
	// PollInterval is how often sources without their own interval are
	// polled. Default notice.DefaultInterval (1 s).
	PollInterval time.Duration

	// Signals that count as a final notice. Default SIGTERM and SIGINT;
	// under Slurm add the signal given to --signal (e.g. SIGUSR1).
	Signals []os.Signal
	// Grace is the time between such a signal and the hard kill (the
	// pod's terminationGracePeriodSeconds, Slurm's GraceTime). It is also
	// assumed for a notice without a deadline. Default 30 s.
	Grace time.Duration
	// NoSignals turns the signal source off.
	NoSignals bool

	// Interval between periodic checkpoints, measured from the start of
	// the previous one. Default [DefaultInterval]; negative disables
	// time-based checkpoints. With Adaptive it is only the first interval.
	Interval time.Duration
	// EverySteps, when positive, also checkpoints every EverySteps steps.
	EverySteps int64
	// Adaptive sets the interval by Young/Daly ([OptimalInterval]) from the
	// measured cost of a checkpoint to the work (the time Step is blocked:
	// snapshot function plus capture) and the observed mean time between
	// interruptions, which is kept in checkpoint metadata so that it
	// survives restarts. The interval is kept at least twice the last
	// upload's duration and at most the mean time between interruptions.
	Adaptive bool
	// MTBI is the prior mean time between interruptions for Adaptive.
	// Default [DefaultMTBI].
	MTBI time.Duration

	// Margin is kept free before a notice's deadline: the emergency save
	// must commit by Deadline − Margin. For short notices the margin is
	// capped at a third of the time left. Default [DefaultMargin].
	Margin time.Duration
	// Horizon: a final notice whose deadline is further away than this is
	// treated as advisory (one early checkpoint) until it comes within it.
	// Default [DefaultHorizon].
	Horizon time.Duration

	// Snapshot returns the worker's state as checkpoint parts. It is
	// called only on the worker's goroutine, inside [Job.Step] or
	// [Job.Checkpoint], so it may read the state without locking. The
	// parts are captured before Step returns; the upload runs in the
	// background. [Job.SetSnapshot] overrides it.
	Snapshot func(step int64) ([]checkpoint.Part, error)
	// SmallSnapshot, if set, returns a smaller state (weights only, a data
	// position, the set of finished shards) that the runner saves instead
	// of the full one when an emergency save of the full state would not
	// commit before the deadline. Such a checkpoint is marked reduced
	// ([Restored.Reduced]). [Job.SetSmallSnapshot] overrides it.
	SmallSnapshot func(step int64) ([]checkpoint.Part, error)

	// Logger receives the runner's decisions with the keys provider,
	// notice.kind, notice.deadline, ckpt.step, bytes, elapsed. Nil
	// discards.
	Logger *slog.Logger
	// OnEvent, if set, receives every [Event]. Calls are serialized and
	// come from one goroutine owned by Run, in order; Run returns only
	// after the last call. A slow OnEvent delays later events, never the
	// work.
	OnEvent func(Event)
}

// options are Options with defaults applied.
type options struct {
	Options
	log *slog.Logger
}

func normalize(in *Options) (*options, error) {
	o := &options{}
	if in != nil {
		o.Options = *in
	}
	switch {
	case o.Store != nil && o.StoreURL != "":
		return nil, errors.New("spot: set Options.Store or Options.StoreURL, not both")
	case o.EverySteps < 0:
		return nil, fmt.Errorf("spot: negative Options.EverySteps %d", o.EverySteps)
	case o.Margin < 0:
		return nil, fmt.Errorf("spot: negative Options.Margin %v", o.Margin)
	case o.Grace < 0:
		return nil, fmt.Errorf("spot: negative Options.Grace %v", o.Grace)
	case o.MTBI < 0:
		return nil, fmt.Errorf("spot: negative Options.MTBI %v", o.MTBI)
	case o.Horizon < 0:
		return nil, fmt.Errorf("spot: negative Options.Horizon %v", o.Horizon)
	}
	if o.Store == nil && o.StoreURL == "" {
		o.StoreURL = DefaultStoreURL
	}
	if o.Provider == "" {
		o.Provider = ProviderAuto
	}
	if o.PollInterval <= 0 {
		o.PollInterval = notice.DefaultInterval
	}
	if o.Grace == 0 {
		o.Grace = notice.DefaultGrace
	}
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.MTBI == 0 {
		o.MTBI = DefaultMTBI
	}
	if o.Margin == 0 {
		o.Margin = DefaultMargin
	}
	if o.Horizon == 0 {
		o.Horizon = DefaultHorizon
	}
	o.log = o.Logger
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	return o, nil
}
