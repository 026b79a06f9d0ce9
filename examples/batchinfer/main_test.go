package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBatch runs the example with a simulated interruption on two
// providers: it must be interrupted once, resume, and score every shard
// exactly once (verify checks the outputs against the inputs).
func TestBatch(t *testing.T) {
	for _, p := range []string{"aws", "azure"} {
		t.Run(p, func(t *testing.T) {
			dir := t.TempDir()
			var out, errOut bytes.Buffer
			code := run(t.Context(), []string{"-dir", dir, "-shards", "40", "-records", "20", "-shard-time", "10ms",
				"-simulate", p, "-interrupt-after", "150ms"}, &out, &errOut)
			require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
			assert.Contains(t, out.String(), "run 1: exit code 75")
			assert.Contains(t, out.String(), "run 2: exit code 0 (40 shards done)")
			assert.Contains(t, out.String(), "all 40 shards scored exactly once")
			outs, err := filepath.Glob(filepath.Join(dir, "out", "shard-*.jsonl"))
			require.NoError(t, err)
			assert.Len(t, outs, 40)
			tmps, _ := filepath.Glob(filepath.Join(dir, "out", ".tmp-*"))
			assert.Empty(t, tmps, "no partial output left behind")
		})
	}
}

// TestBatchResumeFromOutputs: outputs renamed into place but not yet in a
// committed done-set count as done; -keep resumes and scores only the rest.
func TestBatchResumeFromOutputs(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	args := []string{"-dir", dir, "-shards", "12", "-records", "5", "-shard-time", "0", "-simulate", "none"}
	t.Setenv("SPOTSAFE_PROVIDER", "none")
	require.Equal(t, 0, run(t.Context(), args, &out, &errOut), "%s\n%s", out.String(), errOut.String())

	// Lose the checkpoints and three outputs; keep the other outputs.
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "ckpt")))
	for _, i := range []string{"0003", "0007", "0011"} {
		require.NoError(t, os.Remove(filepath.Join(dir, "out", "shard-"+i+".jsonl")))
	}
	before, err := os.Stat(filepath.Join(dir, "out", "shard-0000.jsonl"))
	require.NoError(t, err)
	out.Reset()
	require.Equal(t, 0, run(t.Context(), append(args, "-keep"), &out, &errOut), "%s\n%s", out.String(), errOut.String())
	assert.Contains(t, out.String(), "all 12 shards scored exactly once")
	after, err := os.Stat(filepath.Join(dir, "out", "shard-0000.jsonl"))
	require.NoError(t, err)
	assert.Equal(t, before.ModTime(), after.ModTime(), "a finished shard is not scored again")
}

func TestBatchBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-shards", "0"}, {"-simulate", "oracle"}, {"-shard-time", "-1s"}, {"x"}} {
		var out, errOut bytes.Buffer
		assert.Equal(t, 2, run(t.Context(), args, &out, &errOut), "%v", args)
		assert.NotEmpty(t, errOut.String())
	}
}

func TestBits(t *testing.T) {
	done := []bool{true, false, false, true, true, false, true, false, true, true}
	got := make([]bool, len(done))
	require.NoError(t, unpackBits(got, packBits(done)))
	assert.Equal(t, done, got)
	assert.Error(t, unpackBits(make([]bool, 30), packBits(done)), "a done-set of another size is refused")
}
