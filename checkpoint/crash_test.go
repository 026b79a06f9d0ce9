package checkpoint_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/filestore"
)

// crashDirEnv makes the test binary the crash test's child: a training
// loop that saves checkpoints to the filestore in that directory until it
// is killed.
const crashDirEnv = "SPOTSAFE_CRASH_CHILD_DIR"

// crashState is the deterministic content of step's checkpoint.
func crashState(step int64) map[string][]byte {
	r := rand.New(rand.NewPCG(uint64(step), 99))
	out := map[string][]byte{}
	for _, name := range []string{"model.bin", "optim/state.bin", "rng.bin"} {
		b := make([]byte, 64<<10+r.IntN(1<<20))
		for i := 0; i < len(b); i += 8 {
			v := r.Uint64()
			for j := 0; j < 8 && i+j < len(b); j++ {
				b[i+j] = byte(v >> (8 * j))
			}
		}
		out[name] = b
	}
	out["step.txt"] = []byte(strconv.FormatInt(step, 10))
	return out
}

// TestCrashChild is the child process of TestCrashSafety; it does nothing
// in a normal run.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("helper process of TestCrashSafety")
	}
	ctx := context.Background()
	st, err := filestore.New(dir, nil)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	m, err := checkpoint.NewManager(st, &checkpoint.ManagerOptions{Keep: 3})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	step := int64(1)
	cp, err := m.Latest(ctx)
	switch {
	case err == nil:
		step = cp.Step + 1
	case !errors.Is(err, checkpoint.ErrNoCheckpoint):
		fmt.Println("error", err)
		os.Exit(2)
	}
	for ; ; step++ {
		st := crashState(step)
		var parts []checkpoint.Part
		for name, data := range st {
			parts = append(parts, checkpoint.Bytes(name, data))
		}
		fmt.Println("saving", step)
		u, err := m.Save(ctx, step, parts...)
		if err == nil {
			err = u.Wait(ctx)
		}
		if err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		fmt.Println("committed", step)
	}
}

// TestCrashSafety kills a process that saves checkpoints in a loop at
// random moments, and checks after each kill that restore yields the
// newest committed step, verified byte for byte, never a partial one.
func TestCrashSafety(t *testing.T) {
	if os.Getenv(crashDirEnv) != "" {
		t.Skip("in the child")
	}
	kills := 24
	if testing.Short() {
		kills = 8
	}
	dir := t.TempDir()
	ctx := testCtx(t)
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var committed, started int64 // over all runs
	midSave := 0
	for i := range kills {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		require.NoError(t, cmd.Start())
		var mu sync.Mutex
		lastLine := ""
		var wg sync.WaitGroup
		firstLine := make(chan struct{})
		wg.Go(func() {
			sc := bufio.NewScanner(out)
			for n := 0; sc.Scan(); n++ {
				if n == 0 {
					close(firstLine)
				}
				line := sc.Text()
				f := strings.Fields(line)
				mu.Lock()
				lastLine = line
				if len(f) == 2 {
					n, _ := strconv.ParseInt(f[1], 10, 64)
					switch f[0] {
					case "committed":
						committed = max(committed, n)
					case "saving":
						started = max(started, n)
					}
				}
				mu.Unlock()
			}
		})
		// Kill at a random moment of the save loop (or of its start, on a
		// machine so slow that the first save takes longer than that).
		select {
		case <-firstLine:
		case <-time.After(10 * time.Second):
		}
		time.Sleep(time.Duration(r.IntN(350)) * time.Millisecond)
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		wg.Wait()
		err = cmd.Wait()
		mu.Lock()
		require.False(t, strings.HasPrefix(lastLine, "error"), "child failed: %s\n%s", lastLine, stderr.String())
		if strings.HasPrefix(lastLine, "saving") {
			midSave++
		}
		c, s := committed, started
		mu.Unlock()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "child exited on its own: %s", stderr.String())

		// Restore as the next incarnation would.
		st, err := filestore.New(dir, nil)
		require.NoError(t, err)
		m, err := checkpoint.NewManager(st, nil)
		require.NoError(t, err)
		cp, err := m.Latest(ctx)
		if c == 0 && errors.Is(err, checkpoint.ErrNoCheckpoint) {
			st.Close()
			continue
		}
		require.NoError(t, err, "kill %d: restore", i)
		assert.GreaterOrEqual(t, cp.Step, c, "kill %d: restored an older step than the last one reported committed", i)
		assert.LessOrEqual(t, cp.Step, s, "kill %d: restored a step never saved", i)
		for name, want := range crashState(cp.Step) {
			got, err := cp.ReadPart(ctx, name)
			require.NoError(t, err)
			require.True(t, bytes.Equal(want, got), "kill %d: step %d part %s differs", i, cp.Step, name)
		}
		// Every checkpoint that claims to be valid is.
		infos, err := m.List(ctx)
		require.NoError(t, err)
		for _, in := range infos {
			require.NotEqual(t, checkpoint.StatusCorrupt, in.Status, "kill %d: step %d corrupt: %v", i, in.Step, in.Err)
			if in.Status == checkpoint.StatusValid {
				require.NoError(t, m.Verify(ctx, in.Step), "kill %d", i)
			}
		}
		require.NoError(t, m.Close(ctx))
		st.Close()
	}
	t.Logf("%d kills, %d during a save; newest committed step %d", kills, midSave, committed)
	assert.Positive(t, committed, "the child never committed anything")
	assert.Positive(t, midSave, "no kill landed during a save")
}
