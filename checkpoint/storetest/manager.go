package storetest

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spotsafe/spotsafe/checkpoint"
)

// RunManagerTests runs a checkpoint.Manager's whole cycle on a store: save
// (several parts, in parallel, ranged restore), the on-store layout,
// restore into memory and into a directory, retention and garbage
// collection of leftovers, refusal to recommit a step, two writers racing
// on one step, fallback past a corrupted checkpoint, and a save that fails
// half-way (through [Faulty]) leaving the previous checkpoint intact.
// newStore is called once per subtest and must return an empty store no
// other subtest uses, as for [RunConformance].
func RunManagerTests(t *testing.T, newStore func(t *testing.T) checkpoint.Store) {
	t.Helper()
	s := &managerSuite{newStore: newStore}
	t.Run("SaveRestore", s.testSaveRestore)
	t.Run("Retention", s.testRetention)
	t.Run("StepExists", s.testStepExists)
	t.Run("RacingWriters", s.testRacingWriters)
	t.Run("CorruptFallback", s.testCorruptFallback)
	t.Run("FailedSave", s.testFailedSave)
}

type managerSuite struct {
	newStore func(t *testing.T) checkpoint.Store
}

// manager returns a Manager over a fresh store (or over wrap(store)), a
// bounded context, and the store.
func (s *managerSuite) manager(t *testing.T, opts *checkpoint.ManagerOptions, wrap func(checkpoint.Store) checkpoint.Store) (*checkpoint.Manager, context.Context, checkpoint.Store) {
	t.Helper()
	st := s.newStore(t)
	if st == nil {
		t.Fatal("storetest: newStore returned nil")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	used := st
	if wrap != nil {
		used = wrap(st)
	}
	m, err := checkpoint.NewManager(used, opts)
	if err != nil {
		t.Fatalf("NewManager: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return m, ctx, st
}

// state is a deterministic checkpoint content for a step.
func state(step int64, big int) map[string][]byte {
	return map[string][]byte{
		"model.bin":       randomBytes(fmt.Sprint("model", step), big),
		"optim/adam.bin":  randomBytes(fmt.Sprint("adam", step), big/3+17),
		"empty":           {},
		"loader.json":     fmt.Appendf(nil, `{"step":%d}`, step),
		"rng/state-0.bin": randomBytes(fmt.Sprint("rng", step), 4096),
	}
}

func partsOf(st map[string][]byte) []checkpoint.Part {
	var parts []checkpoint.Part
	for _, name := range slices.Sorted(maps.Keys(st)) {
		if name == "loader.json" {
			data := st[name]
			parts = append(parts, checkpoint.WriterFunc(name, func(w io.Writer) error {
				_, err := w.Write(data)
				return err
			}))
			continue
		}
		parts = append(parts, checkpoint.Bytes(name, st[name]))
	}
	return parts
}

func mustSave(t *testing.T, ctx context.Context, m *checkpoint.Manager, step int64, st map[string][]byte) {
	t.Helper()
	u, err := m.SaveSnapshot(ctx, checkpoint.Snapshot{Step: step, Parts: partsOf(st), Metadata: map[string]string{"step": fmt.Sprint(step)}})
	if err != nil {
		t.Fatalf("Save(step %d): %v", step, err)
	}
	if err := u.Wait(ctx); err != nil {
		t.Fatalf("Save(step %d): Wait: %v", step, err)
	}
	// Let the retention that follows the commit finish.
	if err := m.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

// checkState fails unless cp holds exactly st.
func checkState(t *testing.T, ctx context.Context, cp *checkpoint.Checkpoint, step int64, st map[string][]byte) {
	t.Helper()
	if cp.Step != step {
		t.Fatalf("restored step %d, want %d", cp.Step, step)
	}
	if got := len(cp.Manifest.Parts); got != len(st) {
		t.Fatalf("step %d: manifest lists %d parts, want %d", step, got, len(st))
	}
	for name, want := range st {
		got, err := cp.ReadPart(ctx, name)
		if err != nil {
			t.Fatalf("step %d: ReadPart(%q): %v", step, name, err)
		}
		if d := diff(got, want); d != "" {
			t.Fatalf("step %d: part %q: %s", step, name, d)
		}
	}
}

func steps(t *testing.T, ctx context.Context, m *checkpoint.Manager) map[int64]checkpoint.Status {
	t.Helper()
	infos, err := m.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	out := map[int64]checkpoint.Status{}
	for _, in := range infos {
		out[in.Step] = in.Status
	}
	return out
}

func (s *managerSuite) testSaveRestore(t *testing.T) {
	// Small ranges so that restore reads the large part in parallel ranges.
	m, ctx, st := s.manager(t, &checkpoint.ManagerOptions{RangeSize: 256 << 10, Prefix: "job/7"}, nil)
	want := state(42, 1<<20+123)
	mustSave(t, ctx, m, 42, want)

	// Layout: <prefix>/<zero-padded step>/<part>, MANIFEST.json last.
	objs := mustList(t, ctx, st, "job/7/")
	var keys []string
	for _, o := range objs {
		keys = append(keys, o.Key)
	}
	wantKeys := []string{"job/7/000000000042/MANIFEST.json"}
	for name := range want {
		wantKeys = append(wantKeys, "job/7/000000000042/"+name)
	}
	slices.Sort(wantKeys)
	if !slices.Equal(keys, wantKeys) {
		t.Fatalf("store holds %q, want %q", keys, wantKeys)
	}

	cp, err := m.Latest(ctx)
	if err != nil {
		t.Fatalf("Latest: %v", err)
	}
	checkState(t, ctx, cp, 42, want)
	man := cp.Manifest
	if man.Format != checkpoint.FormatName || man.Version != checkpoint.FormatVersion || man.Step != 42 {
		t.Fatalf("manifest header %q v%d step %d", man.Format, man.Version, man.Step)
	}
	if man.Metadata["step"] != "42" {
		t.Fatalf("manifest metadata %v, want step=42", man.Metadata)
	}
	if man.Writer.PID != os.Getpid() || man.Writer.RunID == "" {
		t.Fatalf("manifest writer %+v, want this process and a run id", man.Writer)
	}
	if time.Since(man.Created) > time.Hour || man.Created.After(time.Now().Add(time.Minute)) {
		t.Fatalf("manifest created %v, want about now", man.Created)
	}
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	for _, p := range man.Parts {
		if p.Size != int64(len(want[p.Name])) || p.CRC32C != crc32.Checksum(want[p.Name], castagnoli) {
			t.Fatalf("manifest part %+v: want size %d crc32c %08x", p, len(want[p.Name]), crc32.Checksum(want[p.Name], castagnoli))
		}
	}

	dir := t.TempDir()
	got, err := m.RestoreTo(ctx, dir, checkpoint.Newest)
	if err != nil {
		t.Fatalf("RestoreTo: %v", err)
	}
	if got.Step != 42 {
		t.Fatalf("RestoreTo restored step %d, want 42", got.Step)
	}
	for name, data := range want {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			t.Fatalf("restored file: %v", err)
		}
		if d := diff(b, data); d != "" {
			t.Fatalf("restored file %q: %s", name, d)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"empty", "loader.json", "model.bin", "optim", "rng"}; !slices.Equal(names, want) {
		t.Fatalf("restore dir holds %q, want %q (the parts and nothing else)", names, want)
	}
	if err := m.Verify(ctx, 42); err != nil {
		t.Fatalf("Verify(42): %v", err)
	}
}

func (s *managerSuite) testRetention(t *testing.T) {
	m, ctx, st := s.manager(t, &checkpoint.ManagerOptions{Keep: 2, KeepEvery: 10}, nil)
	for _, step := range []int64{10, 11, 12} {
		mustSave(t, ctx, m, step, state(step, 1000))
	}
	// Leftovers of interrupted saves: one older than the newest commit,
	// one newer.
	mustPut(t, ctx, st, "000000000005/model.bin", []byte("partial"))
	mustPut(t, ctx, st, "000000000099/model.bin", []byte("in progress elsewhere"))
	mustSave(t, ctx, m, 13, state(13, 1000))

	got := steps(t, ctx, m)
	want := map[int64]checkpoint.Status{
		10: checkpoint.StatusValid, // milestone (KeepEvery)
		12: checkpoint.StatusValid,
		13: checkpoint.StatusValid,
		99: checkpoint.StatusIncomplete, // newer than the newest commit
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after retention: %v, want %v", got, want)
	}
	cp, err := m.Latest(ctx)
	if err != nil {
		t.Fatalf("Latest: %v", err)
	}
	checkState(t, ctx, cp, 13, state(13, 1000))

	deleted, err := m.Prune(ctx, 1)
	if err != nil {
		t.Fatalf("Prune(1): %v", err)
	}
	if !slices.Equal(deleted, []int64{12}) {
		t.Fatalf("Prune(1) deleted %v, want [12]", deleted)
	}
	if _, err := m.Prune(ctx, 0); err == nil {
		t.Fatal("Prune(0) succeeded; want an error (it would delete every checkpoint)")
	}
}

func (s *managerSuite) testStepExists(t *testing.T) {
	m, ctx, _ := s.manager(t, nil, nil)
	first := state(7, 5000)
	mustSave(t, ctx, m, 7, first)
	u, err := m.Save(ctx, 7, partsOf(state(8, 5000))...)
	if err != nil {
		t.Fatalf("Save: %v", err)
	}
	err = u.Wait(ctx)
	if !errors.Is(err, checkpoint.ErrStepExists) || !errors.Is(err, fs.ErrExist) {
		t.Fatalf("saving a committed step again: %v; want ErrStepExists matching fs.ErrExist", err)
	}
	cp, err := m.Latest(ctx)
	if err != nil {
		t.Fatalf("Latest: %v", err)
	}
	checkState(t, ctx, cp, 7, first)
}

func (s *managerSuite) testRacingWriters(t *testing.T) {
	st := s.newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var ms [2]*checkpoint.Manager
	for i := range ms {
		m, err := checkpoint.NewManager(st, &checkpoint.ManagerOptions{RunID: fmt.Sprint("writer-", i)})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close(context.Background())
		ms[i] = m
	}
	for round := range int64(3) {
		step := 100 + round
		var states [2]map[string][]byte
		var errs [2]error
		var wg sync.WaitGroup
		for i, m := range ms {
			states[i] = state(step*10+int64(i), 64<<10)
			wg.Go(func() {
				u, err := m.Save(ctx, step, partsOf(states[i])...)
				if err == nil {
					err = u.Wait(ctx)
				}
				errs[i] = err
			})
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Fatalf("step %d: both writers committed", step)
				}
				winner = i
			case !errors.Is(err, checkpoint.ErrStepExists):
				t.Fatalf("step %d: loser's error %v; want ErrStepExists", step, err)
			}
		}
		if winner < 0 {
			t.Fatalf("step %d: no writer committed: %v", step, errs)
		}
		// Whatever is restored is the winner's state, never a mix.
		cp, err := ms[0].Latest(ctx)
		if err != nil {
			t.Fatalf("Latest: %v", err)
		}
		if cp.Step == step {
			if cp.Manifest.Writer.RunID != fmt.Sprint("writer-", winner) {
				t.Fatalf("step %d: manifest by %q, but writer-%d won", step, cp.Manifest.Writer.RunID, winner)
			}
			checkState(t, ctx, cp, step, states[winner])
		} else if cp.Step > step {
			t.Fatalf("restored step %d, newer than any saved", cp.Step)
		}
	}
}

func (s *managerSuite) testCorruptFallback(t *testing.T) {
	m, ctx, st := s.manager(t, &checkpoint.ManagerOptions{RangeSize: 64 << 10}, nil)
	mustSave(t, ctx, m, 1, state(1, 300<<10))
	mustSave(t, ctx, m, 2, state(2, 300<<10))

	// One flipped byte in the middle of a part of the newest checkpoint.
	key := "000000000002/model.bin"
	data := mustGet(t, ctx, st, key)
	data[len(data)/2] ^= 0x01
	mustPut(t, ctx, st, key, data)

	cp, err := m.Latest(ctx)
	if err != nil {
		t.Fatalf("Latest: %v", err)
	}
	checkState(t, ctx, cp, 1, state(1, 300<<10))

	err = m.Verify(ctx, 2)
	var ce *checkpoint.CorruptError
	if !errors.As(err, &ce) || ce.Part != "model.bin" || ce.Step != 2 {
		t.Fatalf("Verify(2): %v; want a CorruptError naming model.bin", err)
	}
	if err := m.Verify(ctx, 1); err != nil {
		t.Fatalf("Verify(1): %v", err)
	}
	if _, err := m.Load(ctx, 2); !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Fatalf("Load(2): %v; want ErrCorrupt", err)
	}
}

func (s *managerSuite) testFailedSave(t *testing.T) {
	var faulty *Faulty
	m, ctx, _ := s.manager(t, &checkpoint.ManagerOptions{Attempts: 2}, func(st checkpoint.Store) checkpoint.Store {
		faulty = NewFaulty(st)
		return faulty.Store()
	})
	first := state(1, 200<<10)
	mustSave(t, ctx, m, 1, first)

	// Every write breaks off after 10 KiB.
	faulty.Inject(FailAfterBytes(OpWrite, 10<<10, nil))
	u, err := m.Save(ctx, 2, partsOf(state(2, 200<<10))...)
	if err != nil {
		t.Fatalf("Save: %v", err)
	}
	err = u.Wait(ctx)
	var se *checkpoint.SaveError
	if !errors.Is(err, ErrInjected) || !errors.As(err, &se) || se.Step != 2 {
		t.Fatalf("Wait: %v; want a SaveError for step 2 wrapping the injected fault", err)
	}
	faulty.Reset()
	if st := steps(t, ctx, m); st[2] == checkpoint.StatusValid || st[1] != checkpoint.StatusValid {
		t.Fatalf("after the failed save: %v; want step 1 valid and step 2 not committed", st)
	}
	cp, err := m.Latest(ctx)
	if err != nil {
		t.Fatalf("Latest: %v", err)
	}
	checkState(t, ctx, cp, 1, first)

	// The store heals; the next save works and sweeps step 2's leftovers.
	mustSave(t, ctx, m, 3, state(3, 200<<10))
	if st := steps(t, ctx, m); fmt.Sprint(st) != fmt.Sprint(map[int64]checkpoint.Status{1: checkpoint.StatusValid, 3: checkpoint.StatusValid}) {
		t.Fatalf("after the next save: %v; want steps 1 and 3 valid, step 2 gone", st)
	}
}
