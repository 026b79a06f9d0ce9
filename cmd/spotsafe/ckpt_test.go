package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/filestore"
)

// ckptFixture writes, with a Manager on a filestore: valid steps 10 and 20,
// step 30 with one corrupted byte in opt.bin, and a leftover step 40
// without manifest. It returns the store directory and step 20's model.
func ckptFixture(t *testing.T) (string, []byte) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := filestore.New(dir, nil)
	require.NoError(t, err)
	defer st.Close()
	m, err := checkpoint.NewManager(st, &checkpoint.ManagerOptions{Keep: -1})
	require.NoError(t, err)
	model20 := bytes.Repeat([]byte("twenty"), 50000)
	for _, step := range []int64{10, 20, 30} {
		model := bytes.Repeat([]byte{byte(step)}, 300000)
		if step == 20 {
			model = model20
		}
		u, err := m.SaveSnapshot(ctx, checkpoint.Snapshot{Step: step, Parts: []checkpoint.Part{
			checkpoint.Bytes("model.bin", model),
			checkpoint.Bytes("sub/opt.bin", bytes.Repeat([]byte("o"), 1000)),
		}, Metadata: map[string]string{"loss": "0.5"}})
		require.NoError(t, err)
		require.NoError(t, u.Wait(ctx))
	}
	require.NoError(t, m.Close(ctx))
	p := filepath.Join(dir, "000000000030", "sub", "opt.bin")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	b[500] ^= 1
	require.NoError(t, os.WriteFile(p, b, 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "000000000040"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "000000000040", "model.bin"), []byte("partial"), 0o644))
	return dir, model20
}

func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestLs(t *testing.T) {
	dir, _ := ckptFixture(t)
	code, out, errOut := runCmd(t, "ls", dir)
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 5, out)
	assert.Regexp(t, `^STEP\s+STATUS\s+CREATED\s+SIZE\s+PARTS`, lines[0])
	assert.Regexp(t, `^10\s+valid\s+\d{4}-\d\d-\d\dT\S+Z\s+293\.9 KiB\s+2`, lines[1])
	assert.Regexp(t, `^30\s+valid`, lines[3], "a flipped byte is found by verify, not by ls")
	assert.Regexp(t, `^40\s+incomplete\s+.*\s7 B\s+1\s+no manifest`, lines[4])

	// Flags after the URL; JSON.
	code, out, errOut = runCmd(t, "ls", "file://"+dir, "--json")
	require.Equal(t, 0, code, errOut)
	var entries []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &entries), out)
	require.Len(t, entries, 4)
	assert.Equal(t, 20.0, entries[1]["step"])
	assert.Equal(t, "valid", entries[1]["status"])
	assert.Equal(t, 301000.0, entries[1]["bytes"])
	assert.Equal(t, 2.0, entries[1]["parts"])
	assert.Equal(t, map[string]any{"loss": "0.5"}, entries[1]["metadata"])
	assert.Equal(t, "incomplete", entries[3]["status"])

	// A part gone: ls already sees it.
	require.NoError(t, os.Remove(filepath.Join(dir, "000000000010", "model.bin")))
	code, out, _ = runCmd(t, "ls", dir)
	require.Equal(t, 0, code)
	assert.Regexp(t, `(?m)^10\s+corrupt\s+.*part "model.bin": missing`, out)

	code, out, _ = runCmd(t, "ls", t.TempDir())
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "no checkpoints")
}

func TestVerify(t *testing.T) {
	dir, _ := ckptFixture(t)
	code, out, errOut := runCmd(t, "verify", dir)
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "step 10: ok (2 parts, 293.9 KiB)")
	assert.Contains(t, out, "step 20: ok")
	assert.Contains(t, out, `step 30: CORRUPT: part "sub/opt.bin": crc32c`)
	assert.Contains(t, out, "step 40: incomplete, not a checkpoint")
	assert.Contains(t, errOut, "1 of 3 checkpoints corrupt")

	code, out, errOut = runCmd(t, "verify", dir, "--step", "20")
	assert.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "step 20: ok")
	code, out, _ = runCmd(t, "verify", "--step=30", dir)
	assert.Equal(t, 1, code)
	assert.Contains(t, out, `part "sub/opt.bin"`)
	code, _, errOut = runCmd(t, "verify", dir, "--step", "40")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "not committed")
	code, _, errOut = runCmd(t, "verify", dir, "--step", "41")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "no checkpoint at step 41")

	// Leftovers alone are not corruption, but there is nothing to verify.
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "000000000030")))
	code, _, errOut = runCmd(t, "verify", dir)
	assert.Equal(t, 0, code, errOut)
	code, _, errOut = runCmd(t, "verify", t.TempDir())
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "no committed checkpoints")
}

func TestRestore(t *testing.T) {
	dir, model20 := ckptFixture(t)
	out := filepath.Join(t.TempDir(), "restored")
	// Step 30 is corrupt: the newest valid one is 20.
	code, stdout, stderr := runCmd(t, "restore", dir, out)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "restored step 20 (2 parts, 293.9 KiB) into "+out)
	b, err := os.ReadFile(filepath.Join(out, "model.bin"))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(model20, b))
	assert.Contains(t, stderr, "failed verification", "the skipped checkpoint is reported")
	assert.Contains(t, stderr, "restore step 20: 100% (293.9 KiB of 293.9 KiB)")
	assert.NotContains(t, stderr, "\r", "no bar drawing when stderr is not a terminal")

	code, stdout, stderr = runCmd(t, "restore", "--step", "10", dir, out)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "restored step 10")
	b, _ = os.ReadFile(filepath.Join(out, "model.bin"))
	assert.Equal(t, bytes.Repeat([]byte{10}, 300000), b)

	code, _, stderr = runCmd(t, "restore", dir, out, "--step", "30")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, `part "sub/opt.bin" corrupt`)
}

func TestPrune(t *testing.T) {
	dir, _ := ckptFixture(t)
	code, out, errOut := runCmd(t, "prune", dir, "--keep", "1")
	require.Equal(t, 0, code, errOut)
	// Newest valid is 30 by listing (its flipped byte is only found by
	// reading it): 10 and 20 go, and so does nothing newer.
	assert.Equal(t, "deleted step 10\ndeleted step 20\n", out)
	code, out, _ = runCmd(t, "ls", dir)
	require.Equal(t, 0, code)
	assert.NotRegexp(t, `(?m)^(10|20)\s`, out)
	assert.Regexp(t, `(?m)^40\s+incomplete`, out, "a leftover newer than the newest commit stays")

	code, out, _ = runCmd(t, "prune", dir, "--keep", "1")
	require.Equal(t, 0, code)
	assert.Equal(t, "nothing to delete\n", out)
}

func TestCkptUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"ls"},
		{"ls", dir, dir},
		{"ls", dir, "--bogus"},
		{"verify", dir, "--step", "-3"},
		{"verify", dir, "--step", "x"},
		{"restore", dir},
		{"prune", dir},
		{"prune", dir, "--keep", "0"},
		{"prune", dir, "--keep", "2", "--keep-every", "-1"},
	} {
		code, _, errOut := runCmd(t, args...)
		assert.Equal(t, 2, code, "%q: %s", args, errOut)
		assert.Contains(t, errOut, "usage: spotsafe "+args[0], "%q", args)
	}
	code, _, errOut := runCmd(t, "ls", "nosuchscheme://x")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "unknown store URL scheme")
	code, _, _ = runCmd(t, "ls", "--help")
	assert.Equal(t, 0, code)
}

func TestCkptMemURL(t *testing.T) {
	ctx := context.Background()
	st, err := checkpoint.Open(ctx, "mem://ckpt-cli-test")
	require.NoError(t, err)
	m, err := checkpoint.NewManager(st, &checkpoint.ManagerOptions{Prefix: "job"})
	require.NoError(t, err)
	u, err := m.Save(ctx, 5, checkpoint.Bytes("a", []byte("hello")))
	require.NoError(t, err)
	require.NoError(t, u.Wait(ctx))
	require.NoError(t, m.Close(ctx))
	code, out, errOut := runCmd(t, "ls", "mem://ckpt-cli-test", "--prefix", "job")
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `(?m)^5\s+valid`, out)
	code, out, _ = runCmd(t, "verify", "mem://ckpt-cli-test", "--prefix", "job")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "1 checkpoint(s) verified")
}

func TestProgressBar(t *testing.T) {
	p := checkpoint.Progress{Op: checkpoint.OpRestore, Step: 12, Done: 3 << 20, Total: 10 << 20, Elapsed: time.Second}
	assert.Equal(t, "step 12 [#########.....................]  30%  3.0 MiB/10.0 MiB  3.0 MiB/s", progressBar(p, 30))
	p.Done = p.Total
	assert.Contains(t, progressBar(p, 10), "[##########] 100%")
	assert.Contains(t, progressBar(checkpoint.Progress{Step: 1}, 4), "[####] 100%  0 B/0 B")
	assert.Equal(t, "1023 B", humanBytes(1023))
	assert.Equal(t, "1.5 GiB", humanBytes(3<<29))
}
