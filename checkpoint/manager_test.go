package checkpoint_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/memstore"
	"github.com/spotsafe/spotsafe/checkpoint/storetest"
)

func TestManagerMemstore(t *testing.T) {
	storetest.RunManagerTests(t, func(t *testing.T) checkpoint.Store { return memstore.New() })
}

// newManager returns a Manager over st that is closed (and must close
// cleanly) when the test ends.
func newManager(t *testing.T, st checkpoint.Store, opts *checkpoint.ManagerOptions) *checkpoint.Manager {
	t.Helper()
	m, err := checkpoint.NewManager(st, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, m.Close(ctx), "Close")
	})
	return m
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func payload(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), 7})
	r.Read(b)
	return b
}

func save(t *testing.T, ctx context.Context, m *checkpoint.Manager, step int64, parts ...checkpoint.Part) {
	t.Helper()
	u, err := m.Save(ctx, step, parts...)
	require.NoError(t, err, "Save(%d)", step)
	require.NoError(t, u.Wait(ctx), "Save(%d): Wait", step)
	require.NoError(t, m.Flush(ctx))
}

func statuses(t *testing.T, ctx context.Context, m *checkpoint.Manager) map[int64]checkpoint.Status {
	t.Helper()
	infos, err := m.List(ctx)
	require.NoError(t, err)
	out := map[int64]checkpoint.Status{}
	for _, in := range infos {
		out[in.Step] = in.Status
	}
	return out
}

func keys(t *testing.T, ctx context.Context, st checkpoint.Store) []string {
	t.Helper()
	objs, err := st.List(ctx, "")
	require.NoError(t, err)
	var out []string
	for _, o := range objs {
		out = append(out, o.Key)
	}
	return out
}

func TestValidatePartName(t *testing.T) {
	for _, name := range []string{"model.bin", "a/b/c.pt", "shard-00001-of-00008.safetensors", "UPPER_lower-1.2", "rank-x/y", "ranked/x"} {
		assert.NoError(t, checkpoint.ValidatePartName(name), name)
	}
	for _, name := range []string{
		"", "..", "../etc/passwd", "a/../b", "a/./b", ".", "/abs/path", `\abs`, "C:evil", "a\x00b",
		"a//b", "a/", ".hidden", "dir/.hidden", "with space", "semi;colon", "uni\u00e9",
		"MANIFEST.json", "CLAIM.json", "rank-0", "rank-12/model.bin", strings.Repeat("x", 256), strings.Repeat("a/", 600) + "b",
	} {
		err := checkpoint.ValidatePartName(name)
		assert.ErrorIs(t, err, checkpoint.ErrInvalidPart, "%q", name)
	}
}

func TestSaveRejectsBadParts(t *testing.T) {
	ctx := testCtx(t)
	st := memstore.New()
	m := newManager(t, st, nil)
	cases := map[string][]checkpoint.Part{
		"dotdot":       {checkpoint.Bytes("../escape", []byte("x"))},
		"absolute":     {checkpoint.Bytes("/etc/passwd", []byte("x"))},
		"nul":          {checkpoint.Bytes("a\x00b", []byte("x"))},
		"duplicate":    {checkpoint.Bytes("a", []byte("x")), checkpoint.Bytes("a", []byte("y"))},
		"dir-conflict": {checkpoint.Bytes("a", []byte("x")), checkpoint.Bytes("a/b", []byte("y"))},
		"zero-part":    {{}},
		"nil-func":     {checkpoint.WriterFunc("w", nil)},
		"empty-path":   {checkpoint.File("f", "")},
	}
	for name, parts := range cases {
		_, err := m.Save(ctx, 1, parts...)
		assert.ErrorIs(t, err, checkpoint.ErrInvalidPart, name)
	}
	_, err := m.Save(ctx, -1, checkpoint.Bytes("a", nil))
	assert.Error(t, err, "negative step")
	assert.Empty(t, keys(t, ctx, st), "rejected saves stored something")
	// The Manager is still usable.
	save(t, ctx, m, 1, checkpoint.Bytes("a", []byte("ok")))
}

func TestNewManagerErrors(t *testing.T) {
	_, err := checkpoint.NewManager(nil, nil)
	assert.Error(t, err)
	_, err = checkpoint.NewManager(memstore.New(), &checkpoint.ManagerOptions{Prefix: "a/../b"})
	assert.ErrorIs(t, err, checkpoint.ErrInvalidKey)
	_, err = checkpoint.NewManager(memstore.New(), &checkpoint.ManagerOptions{Busy: 99})
	assert.Error(t, err)
	_, err = checkpoint.NewManager(memstore.New(), &checkpoint.ManagerOptions{KeepEvery: -1})
	assert.Error(t, err)
}

func TestPartKindsAndCaptureIsolation(t *testing.T) {
	ctx := testCtx(t)
	// Every Put waits a while, so that the caller's changes after Save
	// returns happen before the upload reads anything.
	faulty := storetest.NewFaulty(memstore.New(), storetest.Slow(storetest.OpPut, 0, 300*time.Millisecond))
	m := newManager(t, faulty, &checkpoint.ManagerOptions{StagingDir: t.TempDir()})

	buf := payload(1, 9<<20+5) // spans several staging chunks
	orig := bytes.Clone(buf)
	path := filepath.Join(t.TempDir(), "file.bin")
	fileData := payload(2, 3<<20)
	require.NoError(t, os.WriteFile(path, fileData, 0o644))
	meta := map[string]string{"k": "v"}

	u, err := m.SaveSnapshot(ctx, checkpoint.Snapshot{
		Step: 5,
		Parts: []checkpoint.Part{
			checkpoint.Bytes("bytes.bin", buf),
			checkpoint.File("dir/file.bin", path),
			checkpoint.WriterFunc("writer.txt", func(w io.Writer) error {
				for i := range 1000 {
					fmt.Fprintf(w, "line %d\n", i)
				}
				return nil
			}),
			checkpoint.Bytes("empty", nil),
		},
		Metadata: meta,
	})
	require.NoError(t, err)
	assert.Equal(t, int64(5), u.Step())
	assert.Greater(t, u.CaptureTime(), time.Duration(0))
	// The loop goes on and changes everything.
	for i := range buf {
		buf[i] = 0
	}
	require.NoError(t, os.WriteFile(path, []byte("rewritten"), 0o644))
	meta["k"] = "changed"
	select {
	case <-u.Done():
		t.Fatal("upload finished before the slowed store could have stored anything")
	default:
	}
	require.NoError(t, u.Wait(ctx))
	assert.NotNil(t, u.Manifest())

	cp, err := m.Latest(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"bytes.bin", "dir/file.bin", "writer.txt", "empty"}, cp.PartNames())
	got, err := cp.ReadPart(ctx, "bytes.bin")
	require.NoError(t, err)
	assert.True(t, bytes.Equal(orig, got), "bytes part changed with the caller's buffer")
	got, err = cp.ReadPart(ctx, "dir/file.bin")
	require.NoError(t, err)
	assert.True(t, bytes.Equal(fileData, got), "file part changed with the file")
	rc, err := cp.OpenPart(ctx, "writer.txt")
	require.NoError(t, err)
	text, err := io.ReadAll(rc)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(text), "line 0\nline 1\n") && strings.HasSuffix(string(text), "line 999\n"))
	got, err = cp.ReadPart(ctx, "empty")
	require.NoError(t, err)
	assert.Empty(t, got)
	assert.Equal(t, "v", cp.Metadata()["k"])
	_, err = cp.ReadPart(ctx, "nope")
	assert.ErrorIs(t, err, fs.ErrNotExist)

	// Staged file copies are gone once the upload is done.
	require.NoError(t, m.Flush(ctx))
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	assert.Len(t, entries, 1)
}

func TestStagingDirRemovedByClose(t *testing.T) {
	ctx := testCtx(t)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	m, err := checkpoint.NewManager(memstore.New(), nil)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(path, []byte("data"), 0o644))
	save(t, ctx, m, 1, checkpoint.File("f", path))
	dirs, _ := filepath.Glob(filepath.Join(tmp, "spotsafe-staging-*"))
	assert.Len(t, dirs, 1, "private staging dir")
	require.NoError(t, m.Close(ctx))
	dirs, _ = filepath.Glob(filepath.Join(tmp, "spotsafe-staging-*"))
	assert.Empty(t, dirs, "Close left the staging dir")
}

func TestCaptureErrors(t *testing.T) {
	ctx := testCtx(t)
	st := memstore.New()
	m := newManager(t, st, nil)
	boom := errors.New("serializer exploded")
	_, err := m.Save(ctx, 1, checkpoint.Bytes("a", []byte("x")), checkpoint.WriterFunc("w", func(w io.Writer) error {
		w.Write([]byte("half"))
		return boom
	}))
	var se *checkpoint.SaveError
	require.ErrorAs(t, err, &se)
	assert.ErrorIs(t, err, boom)
	assert.Equal(t, "w", se.Part)

	_, err = m.Save(ctx, 1, checkpoint.File("f", filepath.Join(t.TempDir(), "missing")))
	assert.ErrorIs(t, err, fs.ErrNotExist)

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = m.Save(canceled, 1, checkpoint.Bytes("a", []byte("x")))
	assert.ErrorIs(t, err, context.Canceled)

	assert.Empty(t, keys(t, ctx, st), "failed captures stored something")
	save(t, ctx, m, 1, checkpoint.Bytes("a", []byte("x")))
}

func TestBusySkip(t *testing.T) {
	ctx := testCtx(t)
	faulty := storetest.NewFaulty(memstore.New())
	faulty.Inject(storetest.Fault{Kind: storetest.FaultHang, Ops: storetest.OpPut, KeyPrefix: "000000000001/"})
	m := newManager(t, faulty, &checkpoint.ManagerOptions{Busy: checkpoint.BusySkip})
	u1, err := m.Save(ctx, 1, checkpoint.Bytes("a", []byte("one")))
	require.NoError(t, err)
	_, err = m.Save(ctx, 2, checkpoint.Bytes("a", []byte("two")))
	require.ErrorIs(t, err, checkpoint.ErrBusy)

	// The emergency path: abandon the hung upload.
	u1.Cancel()
	err = u1.Wait(ctx)
	require.ErrorIs(t, err, checkpoint.ErrCanceled)
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, m.Flush(ctx))
	assert.NotEqual(t, checkpoint.StatusValid, statuses(t, ctx, m)[1], "a cancelled upload committed")
	// A cancelled upload is not a failure to report again.
	save(t, ctx, m, 2, checkpoint.Bytes("a", []byte("two")))
	_, err = m.Latest(ctx)
	require.NoError(t, err)
}

func TestBusyWait(t *testing.T) {
	ctx := testCtx(t)
	faulty := storetest.NewFaulty(memstore.New())
	faulty.Inject(storetest.Fault{Kind: storetest.FaultHang, Ops: storetest.OpPut, KeyPrefix: "000000000001/"})
	m := newManager(t, faulty, nil) // BusyWait is the default
	u1, err := m.Save(ctx, 1, checkpoint.Bytes("a", []byte("one")))
	require.NoError(t, err)

	// A Save whose context ends while waiting gives up, saving nothing.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = m.Save(short, 2, checkpoint.Bytes("a", []byte("two")))
	require.ErrorIs(t, err, context.DeadlineExceeded)

	type result struct {
		u   *checkpoint.Upload
		err error
	}
	second := make(chan result, 1)
	go func() {
		u, err := m.Save(ctx, 2, checkpoint.Bytes("a", []byte("two")))
		second <- result{u, err}
	}()
	select {
	case r := <-second:
		t.Fatalf("Save returned (%v) while the previous upload was still running", r.err)
	case <-time.After(100 * time.Millisecond):
	}
	u1.Cancel()
	r := <-second
	require.NoError(t, r.err)
	select {
	case <-u1.Done():
	default:
		t.Fatal("Save returned before the previous upload ended")
	}
	require.NoError(t, r.u.Wait(ctx))
	cp, err := m.Latest(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(2), cp.Step)
}

func TestBusyReplace(t *testing.T) {
	ctx := testCtx(t)
	faulty := storetest.NewFaulty(memstore.New())
	faulty.Inject(storetest.Fault{Kind: storetest.FaultSlow, Ops: storetest.OpPut, KeyPrefix: "000000000001/", Delay: 500 * time.Millisecond})
	var mu sync.Mutex
	var events []string
	m := newManager(t, faulty, &checkpoint.ManagerOptions{Busy: checkpoint.BusyReplace, OnEvent: func(e checkpoint.Event) {
		mu.Lock()
		events = append(events, fmt.Sprintf("%d:%s", e.Step, e.Kind))
		mu.Unlock()
	}})
	u1, err := m.Save(ctx, 1, checkpoint.Bytes("a", []byte("one")))
	require.NoError(t, err)
	u2, err := m.Save(ctx, 2, checkpoint.Bytes("a", []byte("two")))
	require.NoError(t, err)
	u3, err := m.Save(ctx, 3, checkpoint.Bytes("a", []byte("three")))
	require.NoError(t, err)
	require.ErrorIs(t, u2.Wait(ctx), checkpoint.ErrSuperseded)
	require.NoError(t, u1.Wait(ctx))
	require.NoError(t, u3.Wait(ctx))
	require.NoError(t, m.Flush(ctx))
	assert.Equal(t, map[int64]checkpoint.Status{1: checkpoint.StatusValid, 3: checkpoint.StatusValid}, statuses(t, ctx, m))
	mu.Lock()
	defer mu.Unlock()
	assert.ElementsMatch(t, []string{"1:started", "2:failed", "1:committed", "3:started", "3:committed"}, events)
	assert.Equal(t, []string{"1:committed", "3:started", "3:committed"}, events[2:], "3 started before 1 ended")
}

func TestBusyCancel(t *testing.T) {
	ctx := testCtx(t)
	faulty := storetest.NewFaulty(memstore.New())
	faulty.Inject(storetest.Fault{Kind: storetest.FaultHang, Ops: storetest.OpPut, KeyPrefix: "000000000001/"})
	m := newManager(t, faulty, nil)
	u1, err := m.Save(ctx, 1, checkpoint.Bytes("a", []byte("one")))
	require.NoError(t, err)
	u2, err := m.SaveSnapshot(ctx, checkpoint.Snapshot{Step: 2, Parts: []checkpoint.Part{checkpoint.Bytes("a", []byte("two"))}, Busy: checkpoint.BusyCancel})
	require.NoError(t, err)
	require.ErrorIs(t, u1.Wait(ctx), checkpoint.ErrSuperseded)
	require.NoError(t, u2.Wait(ctx))
	require.NoError(t, m.Flush(ctx))
	assert.Equal(t, map[int64]checkpoint.Status{2: checkpoint.StatusValid}, statuses(t, ctx, m), "the abandoned step's leftovers are swept by the commit after it")
}

func TestFailureReportedByNextSave(t *testing.T) {
	ctx := testCtx(t)
	faulty := storetest.NewFaulty(memstore.New())
	m := newManager(t, faulty, &checkpoint.ManagerOptions{Attempts: 1})
	save(t, ctx, m, 1, checkpoint.Bytes("a", []byte("one")))

	faulty.Inject(storetest.FailCall(storetest.OpPut, 1, nil))
	u, err := m.Save(ctx, 2, checkpoint.Bytes("a", []byte("two")))
	require.NoError(t, err)
	<-u.Done() // nobody calls Wait
	require.NoError(t, m.Flush(ctx))

	_, err = m.Save(ctx, 3, checkpoint.Bytes("a", []byte("three")))
	require.ErrorIs(t, err, checkpoint.ErrPreviousFailed)
	require.ErrorIs(t, err, storetest.ErrInjected)
	assert.Contains(t, err.Error(), "save step 2")
	// Reported once: the next Save saves.
	save(t, ctx, m, 3, checkpoint.Bytes("a", []byte("three")))

	// An error seen through Wait is not reported again.
	faulty.Inject(storetest.FailCall(storetest.OpPut, 1, nil))
	u, err = m.Save(ctx, 4, checkpoint.Bytes("a", []byte("four")))
	require.NoError(t, err)
	require.ErrorIs(t, u.Wait(ctx), storetest.ErrInjected)
	save(t, ctx, m, 5, checkpoint.Bytes("a", []byte("five")))
}

func TestCloseReportsUnseenFailure(t *testing.T) {
	ctx := testCtx(t)
	faulty := storetest.NewFaulty(memstore.New(), storetest.FailCall(storetest.OpPut, 1, nil))
	m, err := checkpoint.NewManager(faulty, &checkpoint.ManagerOptions{Attempts: 1})
	require.NoError(t, err)
	_, err = m.Save(ctx, 1, checkpoint.Bytes("a", []byte("one")))
	require.NoError(t, err)
	err = m.Close(ctx)
	require.ErrorIs(t, err, storetest.ErrInjected)
	_, err = m.Save(ctx, 2, checkpoint.Bytes("a", []byte("two")))
	require.ErrorIs(t, err, checkpoint.ErrClosed)
	require.NoError(t, m.Close(ctx), "second Close")
}

func TestCloseWaitsForUpload(t *testing.T) {
	ctx := testCtx(t)
	faulty := storetest.NewFaulty(memstore.New(), storetest.Slow(storetest.OpPut, 0, 100*time.Millisecond))
	m, err := checkpoint.NewManager(faulty, nil)
	require.NoError(t, err)
	u, err := m.Save(ctx, 1, checkpoint.Bytes("a", []byte("one")))
	require.NoError(t, err)
	require.NoError(t, m.Close(ctx))
	select {
	case <-u.Done():
	default:
		t.Fatal("Close returned before the upload ended")
	}
	require.NoError(t, u.Wait(ctx))
	// Reads still work after Close.
	cp, err := m.Latest(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), cp.Step)
}

func TestCloseAbandonsWhenContextEnds(t *testing.T) {
	ctx := testCtx(t)
	faulty := storetest.NewFaulty(memstore.New(), storetest.Hang(storetest.OpPut))
	m, err := checkpoint.NewManager(faulty, &checkpoint.ManagerOptions{Busy: checkpoint.BusyReplace})
	require.NoError(t, err)
	u1, err := m.Save(ctx, 1, checkpoint.Bytes("a", []byte("one")))
	require.NoError(t, err)
	u2, err := m.Save(ctx, 2, checkpoint.Bytes("a", []byte("two"))) // queued
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err = m.Close(short)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, u1.Wait(ctx), context.DeadlineExceeded)
	require.ErrorIs(t, u2.Wait(ctx), context.DeadlineExceeded)
	objs, err := faulty.Inner().List(ctx, "")
	require.NoError(t, err)
	for _, o := range objs {
		assert.NotContains(t, o.Key, checkpoint.ManifestName, "an abandoned upload committed")
	}
}

func TestUploadDeadline(t *testing.T) {
	ctx := testCtx(t)
	faulty := storetest.NewFaulty(memstore.New(), storetest.Hang(storetest.OpPut))
	m := newManager(t, faulty, nil)
	u, err := m.SaveSnapshot(ctx, checkpoint.Snapshot{Step: 1, Parts: []checkpoint.Part{checkpoint.Bytes("a", []byte("x"))}, Deadline: time.Now().Add(100 * time.Millisecond)})
	require.NoError(t, err)
	err = u.Wait(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "deadline")

	m2 := newManager(t, faulty, &checkpoint.ManagerOptions{UploadTimeout: 100 * time.Millisecond, Prefix: "other"})
	u, err = m2.Save(ctx, 1, checkpoint.Bytes("a", []byte("x")))
	require.NoError(t, err)
	require.ErrorIs(t, u.Wait(ctx), context.DeadlineExceeded)
}

func TestTransientErrorsRetried(t *testing.T) {
	ctx := testCtx(t)
	faulty := storetest.NewFaulty(memstore.New(),
		storetest.FailCall(storetest.OpPut, 1, nil),
		storetest.FailAfterBytes(storetest.OpPut, 1000, nil), // every Put breaks once...
	)
	// ...only the first time.
	faulty.Reset()
	faulty.Inject(storetest.FailCall(storetest.OpPut, 1, nil), storetest.Fault{Kind: storetest.FaultFailAfter, Ops: storetest.OpPut, Bytes: 1000, Nth: 2, Times: 1})
	faulty.Inject(storetest.FailCall(storetest.OpPutIfAbsent, 2, nil)) // the manifest's first attempt
	faulty.Inject(storetest.FailCall(storetest.OpGet, 1, nil))
	m := newManager(t, faulty, nil)
	data := payload(3, 100<<10)
	save(t, ctx, m, 1, checkpoint.Bytes("a", data))
	assert.Equal(t, 3, faulty.Calls(storetest.OpPut), "one part, stored on the third attempt")
	cp, err := m.Latest(ctx)
	require.NoError(t, err)
	got, _ := cp.ReadPart(ctx, "a")
	assert.True(t, bytes.Equal(data, got))
}

func TestDiskFullMemstore(t *testing.T) {
	testDiskFull(t, memstore.New())
}

// testDiskFull: a disk that fills up during a save gives a clear error,
// is not retried, and leaves the previous checkpoint untouched.
func testDiskFull(t *testing.T, inner checkpoint.Store) {
	ctx := testCtx(t)
	faulty := storetest.NewFaulty(inner)
	m := newManager(t, faulty.Store(), nil)
	first := payload(4, 300<<10)
	save(t, ctx, m, 1, checkpoint.Bytes("model.bin", first))

	faulty.Inject(storetest.NoSpace(100 << 10))
	puts := faulty.Calls(storetest.OpPut)
	u, err := m.Save(ctx, 2, checkpoint.Bytes("model.bin", payload(5, 300<<10)))
	require.NoError(t, err)
	err = u.Wait(ctx)
	require.ErrorIs(t, err, syscall.ENOSPC)
	assert.Contains(t, err.Error(), `part "model.bin"`)
	assert.Contains(t, err.Error(), "no space left on device")
	assert.Equal(t, 1, faulty.Calls(storetest.OpPut)-puts, "a full disk was retried")
	faulty.Reset()

	cp, err := m.Latest(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), cp.Step)
	got, _ := cp.ReadPart(ctx, "model.bin")
	assert.True(t, bytes.Equal(first, got), "previous checkpoint changed")
	require.NoError(t, m.Verify(ctx, 1))
	assert.NotEqual(t, checkpoint.StatusValid, statuses(t, ctx, m)[2])
}

func TestEventsProgressLogsThroughput(t *testing.T) {
	ctx := testCtx(t)
	var logs bytes.Buffer
	var mu sync.Mutex
	var events []checkpoint.Event
	var progress []checkpoint.Progress
	m := newManager(t, memstore.New(), &checkpoint.ManagerOptions{
		Logger:     slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		OnEvent:    func(e checkpoint.Event) { mu.Lock(); events = append(events, e); mu.Unlock() },
		OnProgress: func(p checkpoint.Progress) { mu.Lock(); progress = append(progress, p); mu.Unlock() },
	})
	assert.Zero(t, m.Throughput(), "throughput before any save")
	data := payload(6, 5<<20)
	u, err := m.Save(ctx, 9, checkpoint.Bytes("a", data))
	require.NoError(t, err)
	require.NoError(t, u.Wait(ctx))
	done, total := u.Progress()
	assert.Equal(t, int64(len(data)), total)
	assert.Equal(t, total, done)
	require.NoError(t, m.Flush(ctx))

	mu.Lock()
	require.Len(t, events, 2)
	assert.Equal(t, checkpoint.EventStarted, events[0].Kind)
	assert.Equal(t, checkpoint.EventCommitted, events[1].Kind)
	for _, e := range events {
		assert.Equal(t, int64(9), e.Step)
		assert.Equal(t, int64(len(data)), e.Bytes)
	}
	assert.Greater(t, events[1].Duration, time.Duration(0))
	require.NotEmpty(t, progress)
	last := progress[len(progress)-1]
	assert.Equal(t, checkpoint.Progress{Op: checkpoint.OpSave, Step: 9, Done: int64(len(data)), Total: int64(len(data)), Elapsed: last.Elapsed}, last)
	mu.Unlock()
	assert.Greater(t, m.Throughput(), 0.0)

	var committed map[string]any
	for line := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(line, `"checkpoint committed"`) {
			require.NoError(t, json.Unmarshal([]byte(line), &committed))
		}
	}
	require.NotNil(t, committed, "no commit log line in:\n%s", logs.String())
	assert.Equal(t, 9.0, committed["ckpt.step"])
	assert.Equal(t, float64(len(data)), committed["bytes"])
	assert.Contains(t, committed, "elapsed")

	// Restore progress too.
	mu.Lock()
	progress = nil
	mu.Unlock()
	_, err = m.Latest(ctx)
	require.NoError(t, err)
	mu.Lock()
	require.NotEmpty(t, progress)
	assert.Equal(t, checkpoint.OpRestore, progress[len(progress)-1].Op)
	assert.Equal(t, int64(len(data)), progress[len(progress)-1].Done)
	mu.Unlock()
}

// corruptSetup saves steps 1 and 2 and returns the store and manager.
func corruptSetup(t *testing.T) (context.Context, *memstore.Store, *checkpoint.Manager, []byte) {
	ctx := testCtx(t)
	st := memstore.New()
	m := newManager(t, st, &checkpoint.ManagerOptions{RangeSize: 32 << 10})
	one := payload(7, 100<<10)
	save(t, ctx, m, 1, checkpoint.Bytes("model.bin", one), checkpoint.Bytes("opt.bin", payload(8, 1000)))
	save(t, ctx, m, 2, checkpoint.Bytes("model.bin", payload(9, 100<<10)), checkpoint.Bytes("opt.bin", payload(10, 1000)))
	return ctx, st, m, one
}

func put(t *testing.T, ctx context.Context, st checkpoint.Store, key string, data []byte) {
	t.Helper()
	require.NoError(t, st.Put(ctx, key, bytes.NewReader(data), int64(len(data))))
}

func get(t *testing.T, ctx context.Context, st checkpoint.Store, key string) []byte {
	t.Helper()
	rc, err := st.Get(ctx, key)
	require.NoError(t, err)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	return b
}

func TestRestoreFallsBack(t *testing.T) {
	const model2, manifest2 = "000000000002/model.bin", "000000000002/MANIFEST.json"
	cases := map[string]struct {
		damage     func(t *testing.T, ctx context.Context, st *memstore.Store)
		listStatus checkpoint.Status
		part       string // the part Verify must name; "" for the manifest
	}{
		"flipped byte": {func(t *testing.T, ctx context.Context, st *memstore.Store) {
			b := get(t, ctx, st, model2)
			b[77777] ^= 0x20
			put(t, ctx, st, model2, b)
		}, checkpoint.StatusValid, "model.bin"},
		"truncated part": {func(t *testing.T, ctx context.Context, st *memstore.Store) {
			put(t, ctx, st, model2, get(t, ctx, st, model2)[:1000])
		}, checkpoint.StatusCorrupt, "model.bin"},
		"longer part": {func(t *testing.T, ctx context.Context, st *memstore.Store) {
			put(t, ctx, st, model2, append(get(t, ctx, st, model2), 'x'))
		}, checkpoint.StatusCorrupt, "model.bin"},
		"missing part": {func(t *testing.T, ctx context.Context, st *memstore.Store) {
			require.NoError(t, st.Delete(ctx, "000000000002/opt.bin"))
		}, checkpoint.StatusCorrupt, "opt.bin"},
		"garbage manifest": {func(t *testing.T, ctx context.Context, st *memstore.Store) {
			put(t, ctx, st, manifest2, []byte(`{"format": "spotsafe-checkpoint", "version": 1, "step": 2, "parts": [`))
		}, checkpoint.StatusCorrupt, ""},
		"future version": {func(t *testing.T, ctx context.Context, st *memstore.Store) {
			put(t, ctx, st, manifest2, bytes.Replace(get(t, ctx, st, manifest2), []byte(`"version": 1`), []byte(`"version": 2`), 1))
		}, checkpoint.StatusCorrupt, ""},
		"escaping part name": {func(t *testing.T, ctx context.Context, st *memstore.Store) {
			put(t, ctx, st, manifest2, bytes.Replace(get(t, ctx, st, manifest2), []byte(`"opt.bin"`), []byte(`"../../opt.bin"`), 1))
		}, checkpoint.StatusCorrupt, ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, st, m, one := corruptSetup(t)
			c.damage(t, ctx, st)
			cp, err := m.Latest(ctx)
			require.NoError(t, err)
			assert.Equal(t, int64(1), cp.Step)
			got, _ := cp.ReadPart(ctx, "model.bin")
			assert.True(t, bytes.Equal(one, got))

			assert.Equal(t, map[int64]checkpoint.Status{1: checkpoint.StatusValid, 2: c.listStatus}, statuses(t, ctx, m))
			err = m.Verify(ctx, 2)
			var ce *checkpoint.CorruptError
			require.ErrorAs(t, err, &ce)
			assert.ErrorIs(t, err, checkpoint.ErrCorrupt)
			assert.Equal(t, int64(2), ce.Step)
			assert.Equal(t, c.part, ce.Part, "Verify: %v", err)

			dir := t.TempDir()
			man, err := m.RestoreTo(ctx, dir, checkpoint.Newest)
			require.NoError(t, err)
			assert.Equal(t, int64(1), man.Step)
			b, err := os.ReadFile(filepath.Join(dir, "model.bin"))
			require.NoError(t, err)
			assert.True(t, bytes.Equal(one, b))
			_, err = m.RestoreTo(ctx, t.TempDir(), 2)
			assert.ErrorIs(t, err, checkpoint.ErrCorrupt)
		})
	}
}

func TestRestoreNothing(t *testing.T) {
	ctx := testCtx(t)
	st := memstore.New()
	m := newManager(t, st, nil)
	_, err := m.Latest(ctx)
	require.ErrorIs(t, err, checkpoint.ErrNoCheckpoint)
	assert.NotErrorIs(t, err, checkpoint.ErrCorrupt)
	_, err = m.RestoreTo(ctx, t.TempDir(), checkpoint.Newest)
	require.ErrorIs(t, err, checkpoint.ErrNoCheckpoint)

	// Leftovers only: still nothing.
	put(t, ctx, st, "000000000003/model.bin", []byte("partial"))
	_, err = m.Latest(ctx)
	require.ErrorIs(t, err, checkpoint.ErrNoCheckpoint)
	require.ErrorIs(t, m.Verify(ctx, 3), checkpoint.ErrIncomplete)
	require.ErrorIs(t, m.Verify(ctx, 4), checkpoint.ErrNoCheckpoint)
	_, err = m.Load(ctx, 4)
	require.ErrorIs(t, err, checkpoint.ErrNoCheckpoint)

	// Every checkpoint corrupt: ErrNoCheckpoint and ErrCorrupt.
	save(t, ctx, m, 5, checkpoint.Bytes("a", []byte("data")))
	put(t, ctx, st, "000000000005/a", []byte("dat4"))
	_, err = m.Latest(ctx)
	require.ErrorIs(t, err, checkpoint.ErrNoCheckpoint)
	require.ErrorIs(t, err, checkpoint.ErrCorrupt)
}

func TestRestoreStoreErrorDoesNotFallBack(t *testing.T) {
	ctx := testCtx(t)
	faulty := storetest.NewFaulty(memstore.New())
	m := newManager(t, faulty, &checkpoint.ManagerOptions{Attempts: 2})
	save(t, ctx, m, 1, checkpoint.Bytes("a", []byte("one")))
	save(t, ctx, m, 2, checkpoint.Bytes("a", []byte("two")))
	faulty.Inject(storetest.Fault{Kind: storetest.FaultFail, Ops: storetest.OpRead, KeyPrefix: "000000000002/a"})
	_, err := m.Latest(ctx)
	require.ErrorIs(t, err, storetest.ErrInjected)
	assert.NotErrorIs(t, err, checkpoint.ErrNoCheckpoint)

	// A transient read failure is retried.
	faulty.Reset()
	faulty.Inject(storetest.Fault{Kind: storetest.FaultFailAfter, Ops: storetest.OpRead, KeyPrefix: "000000000002/a", Bytes: 1, Times: 1})
	cp, err := m.Latest(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(2), cp.Step)
}

func TestRestoreTo(t *testing.T) {
	ctx := testCtx(t)
	m := newManager(t, memstore.New(), &checkpoint.ManagerOptions{RangeSize: 64 << 10})
	big := payload(11, 1<<20+3)
	save(t, ctx, m, 1, checkpoint.Bytes("model.bin", []byte("old")))
	save(t, ctx, m, 2, checkpoint.Bytes("model.bin", big), checkpoint.Bytes("sub/dir/x.json", []byte("{}")), checkpoint.Bytes("empty", nil))

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "model.bin"), []byte("stale file"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "unrelated"), []byte("keep me"), 0o644))
	man, err := m.RestoreTo(ctx, dir, checkpoint.Newest)
	require.NoError(t, err)
	assert.Equal(t, int64(2), man.Step)
	b, err := os.ReadFile(filepath.Join(dir, "model.bin"))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(big, b))
	b, err = os.ReadFile(filepath.Join(dir, "sub", "dir", "x.json"))
	require.NoError(t, err)
	assert.Equal(t, "{}", string(b))
	fi, err := os.Stat(filepath.Join(dir, "empty"))
	require.NoError(t, err)
	assert.Zero(t, fi.Size())
	b, _ = os.ReadFile(filepath.Join(dir, "unrelated"))
	assert.Equal(t, "keep me", string(b))
	entries, _ := os.ReadDir(dir)
	assert.Len(t, entries, 4, "temporary restore directory left behind")

	man, err = m.RestoreTo(ctx, dir, 1)
	require.NoError(t, err)
	assert.Equal(t, int64(1), man.Step)
	b, _ = os.ReadFile(filepath.Join(dir, "model.bin"))
	assert.Equal(t, "old", string(b))

	// A new directory is created.
	nested := filepath.Join(t.TempDir(), "a", "b")
	_, err = m.RestoreTo(ctx, nested, 1)
	require.NoError(t, err)
	b, _ = os.ReadFile(filepath.Join(nested, "model.bin"))
	assert.Equal(t, "old", string(b))
}

func TestRestoreToNeverEscapes(t *testing.T) {
	ctx := testCtx(t)
	m := newManager(t, memstore.New(), nil)
	save(t, ctx, m, 1, checkpoint.Bytes("sub/x", []byte("payload")))
	outside := t.TempDir()
	dir := t.TempDir()
	// The restore directory holds a symlink pointing outside it.
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "sub")))
	_, err := m.RestoreTo(ctx, dir, checkpoint.Newest)
	require.Error(t, err)
	entries, _ := os.ReadDir(outside)
	assert.Empty(t, entries, "restore wrote through a symlink outside its directory")
	entries, _ = os.ReadDir(dir)
	assert.Len(t, entries, 1, "temporary restore directory left behind")
}

func TestClaims(t *testing.T) {
	ctx := testCtx(t)
	st := memstore.New()
	m := newManager(t, st, nil)
	claim := func(step int64, host string, pid int, expires time.Time) {
		b, err := json.Marshal(map[string]any{"host": host, "pid": pid, "run_id": "other", "created": time.Now(), "expires": expires, "nonce": "n"})
		require.NoError(t, err)
		put(t, ctx, st, fmt.Sprintf("%012d/%s", step, checkpoint.ClaimName), b)
	}
	host, _ := os.Hostname()

	// A live claim by another writer: refused, nothing written.
	claim(1, "elsewhere", 42, time.Now().Add(time.Hour))
	u, err := m.Save(ctx, 1, checkpoint.Bytes("a", []byte("x")))
	require.NoError(t, err)
	err = u.Wait(ctx)
	require.ErrorIs(t, err, checkpoint.ErrStepExists)
	require.ErrorIs(t, err, fs.ErrExist)
	assert.Contains(t, err.Error(), "being saved by run other")
	assert.Equal(t, []string{"000000000001/CLAIM.json"}, keys(t, ctx, st))

	// An expired claim is taken over.
	claim(2, "elsewhere", 42, time.Now().Add(-time.Second))
	save(t, ctx, m, 2, checkpoint.Bytes("a", []byte("x")))

	// A claim by a dead process on this host is taken over.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	require.NoError(t, cmd.Run())
	claim(3, host, cmd.Process.Pid, time.Now().Add(time.Hour))
	save(t, ctx, m, 3, checkpoint.Bytes("a", []byte("x")))

	// No claim is left after commits.
	for _, k := range keys(t, ctx, st) {
		if !strings.HasPrefix(k, "000000000001/") {
			assert.NotContains(t, k, checkpoint.ClaimName)
		}
	}
}

func TestRetentionOptions(t *testing.T) {
	ctx := testCtx(t)
	st := memstore.New()
	m := newManager(t, st, &checkpoint.ManagerOptions{Keep: -1})
	for step := range int64(5) {
		save(t, ctx, m, step, checkpoint.Bytes("a", []byte{byte(step)}))
	}
	assert.Len(t, statuses(t, ctx, m), 5, "Keep < 0 deleted something")

	m2 := newManager(t, st, &checkpoint.ManagerOptions{KeepEvery: 2})
	save(t, ctx, m2, 5, checkpoint.Bytes("a", []byte{5}))
	// Newest 3 (5, 4, 3) plus the even milestones 0 and 2.
	assert.Equal(t, map[int64]checkpoint.Status{0: 1, 2: 1, 3: 1, 4: 1, 5: 1}, statuses(t, ctx, m2))

	// A corrupt checkpoint never counts as one of the kept ones, and a
	// corrupt one newer than the kept ones stays for inspection.
	put(t, ctx, st, "000000000005/a", []byte{1, 2})
	deleted, err := m2.Prune(ctx, 1)
	require.NoError(t, err)
	assert.Equal(t, []int64{3}, deleted)
	assert.Equal(t, map[int64]checkpoint.Status{0: checkpoint.StatusValid, 2: checkpoint.StatusValid, 4: checkpoint.StatusValid, 5: checkpoint.StatusCorrupt}, statuses(t, ctx, m2))
}

func TestCRCMatchesStandardLibrary(t *testing.T) {
	ctx := testCtx(t)
	st := memstore.New()
	m := newManager(t, st, nil)
	data := payload(12, 10<<20+1)
	save(t, ctx, m, 1, checkpoint.Bytes("a", data))
	var man checkpoint.Manifest
	require.NoError(t, json.Unmarshal(get(t, ctx, st, "000000000001/MANIFEST.json"), &man))
	assert.Equal(t, crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)), man.Parts[0].CRC32C)
}

// TestStagingReused checks that repeated saves take their staging memory
// from the Manager's pool instead of allocating it.
func TestStagingReused(t *testing.T) {
	ctx := testCtx(t)
	m := newManager(t, memstore.New(), nil)
	data := make([]byte, 3*checkpoint.ChunkSize)
	save(t, ctx, m, 1, checkpoint.Bytes("a", data))
	require.Equal(t, 3, checkpoint.PoolChunks(m), "chunks kept after a 3-chunk save")
	save(t, ctx, m, 2, checkpoint.Bytes("a", data))
	assert.Equal(t, 3, checkpoint.PoolChunks(m), "chunks kept after the second save")
	assert.Equal(t, 3, checkpoint.PoolAllocs(m), "the second save allocated staging memory")

	none := newManager(t, memstore.New(), &checkpoint.ManagerOptions{StagingRetain: -1})
	save(t, ctx, none, 1, checkpoint.Bytes("a", data))
	assert.Zero(t, checkpoint.PoolChunks(none), "StagingRetain -1 kept chunks")
	some := newManager(t, memstore.New(), &checkpoint.ManagerOptions{StagingRetain: checkpoint.ChunkSize})
	save(t, ctx, some, 1, checkpoint.Bytes("a", data))
	assert.Equal(t, 1, checkpoint.PoolChunks(some))
}

// TestReadsOnlyNeededManifests: restore and retention read manifests from
// the newest down only as far as they need, not one per stored step.
func TestReadsOnlyNeededManifests(t *testing.T) {
	ctx := testCtx(t)
	faulty := storetest.NewFaulty(memstore.New())
	m := newManager(t, faulty, &checkpoint.ManagerOptions{Keep: 2, KeepEvery: 1})
	for step := range int64(12) {
		save(t, ctx, m, step, checkpoint.Bytes("a", []byte{byte(step)}))
	}
	require.Len(t, statuses(t, ctx, m), 12, "KeepEvery 1 keeps every step")
	gets := faulty.Calls(storetest.OpGet)
	cp, err := m.Latest(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(11), cp.Step)
	assert.Equal(t, 2, faulty.Calls(storetest.OpGet)-gets, "Latest: one manifest and one part")

	gets = faulty.Calls(storetest.OpGet)
	_, err = m.Prune(ctx, 2)
	require.NoError(t, err)
	assert.Equal(t, 2, faulty.Calls(storetest.OpGet)-gets, "Prune(2): the two newest manifests")
}
