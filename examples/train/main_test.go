package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/notice/noticetest"
)

// TestMain lets the demo re-execute the test binary as its worker, as it
// re-executes the train binary.
func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == roleWorker {
		os.Exit(workerMain(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestDemo runs the demo's whole cycle against every provider's fake: two
// processes, zero steps lost, the loss of an uninterrupted run.
func TestDemo(t *testing.T) {
	for _, p := range noticetest.Providers() {
		t.Run(p, func(t *testing.T) {
			store := "file://" + filepath.Join(t.TempDir(), "store")
			var out, errOut bytes.Buffer
			code := demoMain(t.Context(), []string{"-store", store, "-steps", "600", "-simulate", p,
				"-interrupt-after", "200ms", "-interval", "150ms", "-dim", "64", "-step-time", "1ms"}, &out, &errOut)
			require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
			s := out.String()
			assert.Contains(t, s, "run 1: exit code 75")
			assert.Contains(t, s, "run 2: finished (exit code 0)")
			assert.Contains(t, s, "steps lost:          0")
			assert.Contains(t, s, "bit-identical: true")
			assert.Contains(t, errOut.String(), "emergency checkpoint committed")
		})
	}
}

// TestDemoKeep: with -keep a second demo resumes from the first one's final
// checkpoint and has nothing left to train; without it, it starts afresh.
func TestDemoKeep(t *testing.T) {
	store := "file://" + filepath.Join(t.TempDir(), "store")
	args := []string{"-store", store, "-steps", "400", "-interrupt-after", "150ms", "-interval", "100ms", "-dim", "64", "-step-time", "1ms"}
	var out, errOut bytes.Buffer
	require.Equal(t, 0, demoMain(t.Context(), args, &out, &errOut), "%s\n%s", out.String(), errOut.String())

	out.Reset()
	errOut.Reset()
	require.Equal(t, 0, demoMain(t.Context(), append(args, "-keep", "-interrupt-after", "1h"), &out, &errOut), "%s\n%s", out.String(), errOut.String())
	assert.Contains(t, errOut.String(), "checkpoint restored")
	assert.Contains(t, errOut.String(), "ckpt.step=400")

	out.Reset()
	errOut.Reset()
	require.Equal(t, 0, demoMain(t.Context(), append(args, "-interrupt-after", "1h"), &out, &errOut))
	assert.Contains(t, errOut.String(), "no checkpoint; starting afresh")
}

// TestWorkerAlone: -simulate none runs the job once in this process and
// finishes with the uninterrupted loss.
func TestWorkerAlone(t *testing.T) {
	t.Setenv("SPOTSAFE_PROVIDER", "none") // no cloud probes from a test
	store := "file://" + filepath.Join(t.TempDir(), "store")
	var out, errOut bytes.Buffer
	code := demoMain(t.Context(), []string{"-store", store, "-steps", "300", "-simulate", "none", "-dim", "128"}, &out, &errOut)
	require.Equal(t, 0, code, "%s\n%s", out.String(), errOut.String())
	ref := newTrainer(128, 32, 1)
	for range 300 {
		ref.step()
	}
	assert.Contains(t, out.String(), fmt.Sprintf("run ended: exit code 0, step 300, loss %.12g", ref.loss()))
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-steps", "0"},
		{"-simulate", "oracle"},
		{"-interrupt-after", "-1s"},
		{"extra"},
		{"-nosuchflag"},
	} {
		var out, errOut bytes.Buffer
		assert.Equal(t, 2, demoMain(t.Context(), args, &out, &errOut), "%v", args)
		assert.NotEmpty(t, errOut.String(), "%v says why", args)
	}
}

func TestTrainerResumesExactly(t *testing.T) {
	// The model itself: a trainer loaded from another's parts continues
	// bit for bit.
	a := newTrainer(64, 8, 3)
	for range 50 {
		a.step()
	}
	b := newTrainer(64, 8, 3)
	require.NoError(t, b.load(map[string][]byte{
		partParams: floats(a.w), partOptimizer: floats(a.v), partRNG: a.rngState(), partData: a.dataState(),
	}))
	for range 50 {
		a.step()
		b.step()
	}
	assert.Equal(t, a.loss(), b.loss())
	assert.Error(t, b.load(map[string][]byte{partParams: floats(a.w)}), "a checkpoint of the wrong shape is refused")
}
