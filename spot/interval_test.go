package spot_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/spot"
)

func TestOptimalInterval(t *testing.T) {
	// Young's first-order value sqrt(2CM) dominates for small C/M:
	// C = 30 s, M = 6 h → sqrt(2·30·21600) ≈ 1138 s, Daly's correction is
	// small and the −C term removes 30 s.
	got := spot.OptimalInterval(30*time.Second, 6*time.Hour)
	young := math.Sqrt(2 * 30 * 21600)
	assert.InDelta(t, young-30, got.Seconds(), young*0.05)
	// Monotone in both inputs.
	assert.Greater(t, spot.OptimalInterval(60*time.Second, 6*time.Hour), got)
	assert.Greater(t, spot.OptimalInterval(30*time.Second, 12*time.Hour), got)
	// C ≥ 2M: checkpoint once per interruption interval.
	assert.Equal(t, time.Minute, spot.OptimalInterval(3*time.Minute, time.Minute))
	assert.Zero(t, spot.OptimalInterval(0, time.Hour))
}

func TestFits(t *testing.T) {
	const mib = 1 << 20
	// 64 MiB at 100 MiB/s + 20 ms ≈ 660 ms.
	assert.InDelta(t, 0.66, spot.EstimateSave(64*mib, 100*mib, 20*time.Millisecond).Seconds(), 0.001)
	assert.True(t, spot.Fits(64*mib, 100*mib, 20*time.Millisecond, time.Second))
	assert.False(t, spot.Fits(64*mib, 100*mib, 20*time.Millisecond, 500*time.Millisecond))
	assert.True(t, spot.Fits(64*mib, 0, 0, time.Second), "unknown throughput: try")
	assert.False(t, spot.Fits(64*mib, 0, 0, -time.Second))
}

func TestExitCode(t *testing.T) {
	n := notice.Notice{Provider: "aws", Kind: notice.KindTerminate}
	saved := &spot.InterruptedError{Notice: n, Step: 7, Committed: true}
	failed := &spot.InterruptedError{Notice: n, Step: 5, Err: errors.New("disk full")}
	assert.Equal(t, spot.ExitFinished, spot.ExitCode(nil))
	assert.Equal(t, spot.ExitInterrupted, spot.ExitCode(fmt.Errorf("run: %w", saved)))
	assert.Equal(t, spot.ExitSaveFailed, spot.ExitCode(fmt.Errorf("run: %w", failed)))
	assert.Equal(t, spot.ExitFailed, spot.ExitCode(errors.New("boom")))
	assert.Equal(t, spot.ExitFailed, spot.ExitCode(context.Canceled))
	assert.ErrorIs(t, failed, spot.ErrInterrupted)
	assert.NotErrorIs(t, saved, spot.ErrSaveFailed)
	assert.Contains(t, failed.Error(), "disk full")
}
