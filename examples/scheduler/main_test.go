package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == roleWorker {
		os.Exit(workerMain(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestSchedule: with alibaba (the longest notice) interrupting every run,
// the scheduler restarts there once, then moves the job to aws, where it
// finishes with nothing redone.
func TestSchedule(t *testing.T) {
	var out, errOut bytes.Buffer
	code := schedulerMain(t.Context(), []string{"-steps", "600", "-step-time", "1ms", "-interrupt", "alibaba=150ms"}, &out, &errOut)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	s := out.String()
	place := strings.Index(s, "place the job on alibaba")
	restart := strings.Index(s, "decision: restart on alibaba")
	move := strings.Index(s, "decision: move from alibaba (score 100) to aws (score 120)")
	done := strings.Index(s, "job finished on aws at step 600 after 3 run(s); 0 steps redone")
	require.True(t, place >= 0 && restart > place && move > restart && done > move, "decisions in order:\n%s", s)
	assert.Equal(t, 2, strings.Count(s, "emergency checkpoint of step"), s)
	assert.Equal(t, 2, strings.Count(s, "job restored step"), s)
}

// TestScheduleNoInterruptions: a quiet cloud runs the job once.
func TestScheduleNoInterruptions(t *testing.T) {
	var out, errOut bytes.Buffer
	code := schedulerMain(t.Context(), []string{"-steps", "100", "-interrupt", ""}, &out, &errOut)
	require.Equal(t, 0, code, "%s\n%s", out.String(), errOut.String())
	assert.Contains(t, out.String(), "job finished on alibaba at step 100 after 1 run(s)")
}

func TestScheduleBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-steps", "0"}, {"-interrupt", "oracle=1s"}, {"-interrupt", "aws"}, {"-interrupt", "aws=-1s"}, {"x"}} {
		var out, errOut bytes.Buffer
		assert.Equal(t, 2, schedulerMain(t.Context(), args, &out, &errOut), "%v", args)
		assert.NotEmpty(t, errOut.String())
	}
}
