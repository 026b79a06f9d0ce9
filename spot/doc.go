// Package spot wraps a worker's entrypoint so that it survives spot and
// preemptible instances: [Run] restores the newest checkpoint, watches the
// cloud's interruption notices and the termination signals, takes periodic
// and early checkpoints at the worker's safe points, and on a final notice
// saves an emergency checkpoint sized to commit before the deadline, stops
// the work and returns an error that [ExitCode] maps to an exit code a
// scheduler (Kubernetes, Slurm, systemd) restarts on.
//
// A worker looks like this:
//
//	err := spot.Run(ctx, func(ctx context.Context, job *spot.Job) error {
//		state, step := newState(), int64(0)
//		if r := job.Restored(); r != nil {
//			state.load(r)
//			step = r.Step
//		}
//		job.SetSnapshot(state.parts)
//		for ; step < total; step++ {
//			if err := job.Step(ctx, step); err != nil {
//				return err // interrupted (checkpoint committed), or ctx ended
//			}
//			state.train()
//		}
//		return job.Checkpoint(ctx, step)
//	}, &spot.Options{StoreURL: "s3://bucket/job-7"})
//	os.Exit(spot.ExitCode(err))
//
// Scheduler helpers: [OptimalInterval] (Young/Daly), [EstimateSave] and
// [Fits], and the [Event] stream (Options.OnEvent).
package spot
