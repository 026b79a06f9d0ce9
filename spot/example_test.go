package spot_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/memstore"
	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/spot"
)

func ExampleRun() {
	store := memstore.New() // in production: StoreURL "s3://bucket/job" etc.
	job := func(ctx context.Context, job *spot.Job) error {
		var sum, step int64
		if r := job.Restored(); r != nil {
			b, err := r.ReadPart(ctx, "sum")
			if err != nil {
				return err
			}
			sum, step = int64(binary.LittleEndian.Uint64(b)), r.Step
			fmt.Println("resumed at step", step)
		}
		// Called only at safe points, on this goroutine.
		job.SetSnapshot(func(int64) ([]checkpoint.Part, error) {
			return []checkpoint.Part{checkpoint.Bytes("sum", binary.LittleEndian.AppendUint64(nil, uint64(sum)))}, nil
		})
		for ; step < 100; step++ {
			if err := job.Step(ctx, step); err != nil {
				return err // interrupted: the checkpoint of this step is committed
			}
			sum += step
		}
		fmt.Println("sum", sum)
		return job.Checkpoint(ctx, step)
	}
	opts := &spot.Options{Store: store, Provider: spot.ProviderNone, NoSignals: true, EverySteps: 25}
	for range 2 {
		err := spot.Run(context.Background(), job, opts)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("exit code", spot.ExitCode(err))
	}
	// Output:
	// sum 4950
	// exit code 0
	// resumed at step 100
	// sum 4950
	// exit code 0
}

func ExampleExitCode() {
	n := notice.Notice{Provider: "gcp", Kind: notice.KindPreempt}
	fmt.Println(spot.ExitCode(nil))
	fmt.Println(spot.ExitCode(errors.New("bad input")))
	fmt.Println(spot.ExitCode(&spot.InterruptedError{Notice: n, Step: 1200, Committed: true}))
	fmt.Println(spot.ExitCode(&spot.InterruptedError{Notice: n, Step: 1000, Err: errors.New("store unreachable")}))
	// Output:
	// 0
	// 1
	// 75
	// 74
}

func ExampleOptions_onEvent() {
	opts := &spot.Options{
		Store: memstore.New(), Provider: spot.ProviderNone, NoSignals: true, EverySteps: 10,
		OnEvent: func(e spot.Event) {
			if e.Kind == spot.EventCheckpointCommitted {
				fmt.Println(e.Kind, e.Step, e.Reason)
			}
		},
	}
	err := spot.Run(context.Background(), func(ctx context.Context, job *spot.Job) error {
		job.SetSnapshot(func(step int64) ([]checkpoint.Part, error) {
			return []checkpoint.Part{checkpoint.Bytes("step", binary.LittleEndian.AppendUint64(nil, uint64(step)))}, nil
		})
		for step := range int64(10) {
			if err := job.Step(ctx, step); err != nil {
				return err
			}
		}
		return job.Checkpoint(ctx, 10)
	}, opts)
	fmt.Println(err)
	// Output:
	// checkpoint-committed 10 explicit
	// <nil>
}
