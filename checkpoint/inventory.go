package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"
)

// Status is the state of a step directory.
type Status int

const (
	// StatusValid: the manifest parses and every part it lists is stored
	// with the listed size. (Contents are checked by Verify and at
	// restore.)
	StatusValid Status = iota + 1
	// StatusIncomplete: objects without a manifest, left by an upload in
	// progress or an interrupted one. Not a checkpoint, not corruption.
	StatusIncomplete
	// StatusCorrupt: the manifest is unreadable, or a part is missing or
	// has the wrong size.
	StatusCorrupt
)

// String returns "valid", "incomplete" or "corrupt".
func (s Status) String() string {
	switch s {
	case StatusValid:
		return "valid"
	case StatusIncomplete:
		return "incomplete"
	case StatusCorrupt:
		return "corrupt"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// MarshalText makes a Status a JSON string.
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Info describes one step directory, as [Manager.List] sees it.
type Info struct {
	Step   int64
	Status Status
	// Created is the manifest's time; for an incomplete step, the time
	// of its newest object.
	Created time.Time
	// Bytes and Parts count the manifest's parts; for an incomplete step,
	// the objects present.
	Bytes int64
	Parts int
	// Manifest is the parsed manifest, nil if none parsed.
	Manifest *Manifest
	// Err says why the step is corrupt (a [*CorruptError]).
	Err error
}

// entry is an Info plus the objects of the step.
type entry struct {
	Info
	manifestKey string                // "" when there is no manifest object
	claimKey    string                // "" when there is no claim object
	objects     map[string]ObjectInfo // by part name, manifest excluded
}

// List returns every step directory under the prefix, oldest first, with
// its status. It reads the manifests but not the parts.
func (m *Manager) List(ctx context.Context) ([]Info, error) {
	ents, err := m.inventory(ctx, m.root)
	if err != nil {
		return nil, err
	}
	out := make([]Info, len(ents))
	for i, e := range ents {
		out[i] = e.Info
	}
	return out, nil
}

// inventory lists the step directories under prefix (m.root or one step's
// directory) and classifies them all (one manifest read per committed
// step).
func (m *Manager) inventory(ctx context.Context, prefix string) ([]*entry, error) {
	ents, err := m.scan(ctx, prefix)
	if err != nil {
		return nil, err
	}
	err = forEach(ctx, len(ents), m.opts.Concurrency, func(ctx context.Context, i int) error {
		if ents[i].manifestKey == "" {
			return nil
		}
		return m.classify(ctx, ents[i])
	})
	if err != nil {
		return nil, err
	}
	return ents, nil
}

// scan lists the step directories under prefix, sorted by step, without
// reading anything: steps without a manifest are StatusIncomplete, the
// others have no status until classify reads their manifest.
func (m *Manager) scan(ctx context.Context, prefix string) ([]*entry, error) {
	var objs []ObjectInfo
	err := m.retry(ctx, "list "+prefix, func() (err error) {
		objs, err = m.store.List(ctx, prefix)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list: %w", err)
	}
	byStep := map[int64]*entry{}
	for _, o := range objs {
		rest, ok := strings.CutPrefix(o.Key, m.root)
		if !ok {
			continue
		}
		dir, name, ok := strings.Cut(rest, "/")
		if !ok || name == "" {
			continue
		}
		step, ok := parseStepDir(dir)
		if !ok {
			continue
		}
		e := byStep[step]
		if e == nil {
			e = &entry{Info: Info{Step: step}, objects: map[string]ObjectInfo{}}
			byStep[step] = e
		}
		switch name {
		case ManifestName:
			e.manifestKey = o.Key
		case ClaimName:
			e.claimKey = o.Key
		default:
			e.objects[name] = o
		}
	}
	ents := make([]*entry, 0, len(byStep))
	for _, e := range byStep {
		ents = append(ents, e)
	}
	slices.SortFunc(ents, func(a, b *entry) int { return compareInt(a.Step, b.Step) })
	for _, e := range ents {
		if e.manifestKey == "" {
			e.setIncomplete()
		}
	}
	return ents, nil
}

func compareInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// classify reads the entry's manifest and sets its status. Only store
// errors are returned; corruption is recorded in the entry.
func (m *Manager) classify(ctx context.Context, e *entry) error {
	if e.manifestKey == "" {
		e.setIncomplete()
		return nil
	}
	data, err := m.readSmall(ctx, e.manifestKey)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// Deleted since the listing (retention by another process).
		e.manifestKey = ""
		e.setIncomplete()
		return nil
	case err != nil:
		return fmt.Errorf("checkpoint: step %d: read manifest: %w", e.Step, err)
	}
	man, err := parseManifest(data, e.Step)
	if err != nil {
		e.Status, e.Err = StatusCorrupt, err
		return nil
	}
	e.Manifest = man
	e.Created = man.Created
	e.Bytes = man.Bytes()
	e.Parts = len(man.Parts)
	e.Status = StatusValid
	for _, p := range man.Parts {
		o, ok := e.objects[p.Name]
		switch {
		case !ok:
			e.Status = StatusCorrupt
			e.Err = &CorruptError{Step: e.Step, Part: p.Name, Reason: "missing", Err: fs.ErrNotExist}
		case o.Size != p.Size:
			e.Status = StatusCorrupt
			e.Err = &CorruptError{Step: e.Step, Part: p.Name, Reason: fmt.Sprintf("size %d, manifest says %d", o.Size, p.Size)}
		default:
			continue
		}
		break
	}
	return nil
}

func (e *entry) setIncomplete() {
	e.Status = StatusIncomplete
	e.Parts = len(e.objects)
	e.Bytes = 0
	for _, o := range e.objects {
		e.Bytes += o.Size
		if o.Modified.After(e.Created) {
			e.Created = o.Modified
		}
	}
}

// Verify checks one committed checkpoint completely: manifest, presence,
// sizes, and the CRC-32C of every byte. It returns nil, a
// [*CorruptError] (matching [ErrCorrupt]) naming the bad part, an error
// wrapping [ErrIncomplete] for a step without manifest, one wrapping
// [ErrNoCheckpoint] for a step with no objects, or a store error.
func (m *Manager) Verify(ctx context.Context, step int64) error {
	e, err := m.lookup(ctx, step)
	if err != nil {
		return err
	}
	if e.Err != nil {
		return e.Err
	}
	sinks := make([]sink, len(e.Manifest.Parts))
	for i := range sinks {
		sinks[i] = discardSink{}
	}
	return m.fetchParts(ctx, e.Step, e.Manifest, sinks, m.newTracker(OpRestore, step, e.Bytes))
}

// lookup returns the inventory entry of one step that has a manifest.
func (m *Manager) lookup(ctx context.Context, step int64) (*entry, error) {
	if step < 0 {
		return nil, fmt.Errorf("checkpoint: negative step %d", step)
	}
	ents, err := m.inventory(ctx, m.root+stepDir(step)+"/")
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		if e.Step != step {
			continue
		}
		if e.Status == StatusIncomplete {
			return nil, fmt.Errorf("checkpoint: step %d: %w", step, ErrIncomplete)
		}
		return e, nil
	}
	return nil, fmt.Errorf("checkpoint: step %d: %w", step, ErrNoCheckpoint)
}

// Prune applies retention now: it keeps the newest keep valid
// checkpoints (and, with ManagerOptions.KeepEvery, the milestone steps),
// deletes older committed ones, and deletes incomplete steps older than the
// newest valid commit. Steps being uploaded by this Manager are left
// alone. Each checkpoint is deleted manifest first, so an interrupted
// prune leaves an incomplete step, never a corrupt one. It returns the
// steps deleted.
func (m *Manager) Prune(ctx context.Context, keep int) ([]int64, error) {
	if keep < 1 {
		return nil, fmt.Errorf("checkpoint: prune: keep must be at least 1, got %d", keep)
	}
	m.mu.Lock()
	var exclude []int64
	for _, u := range []*Upload{m.active, m.pending} {
		if u != nil {
			exclude = append(exclude, u.step)
		}
	}
	m.mu.Unlock()
	return m.prune(ctx, keep, exclude)
}

func (m *Manager) prune(ctx context.Context, keep int, exclude []int64) ([]int64, error) {
	ents, err := m.scan(ctx, m.root)
	if err != nil {
		return nil, err
	}
	// Read manifests newest first until keep valid checkpoints are found:
	// whatever is older goes (milestones apart) without being read.
	found := 0
	for i := len(ents) - 1; i >= 0 && found < keep; i-- {
		if ents[i].manifestKey == "" {
			continue
		}
		if err := m.classify(ctx, ents[i]); err != nil {
			return nil, err
		}
		if ents[i].Status == StatusValid {
			found++
		}
	}
	var deleted []int64
	var errs []error
	for _, e := range retentionPlan(ents, keep, m.opts.KeepEvery, exclude) {
		if err := m.deleteStep(ctx, e); err != nil {
			errs = append(errs, err)
			continue
		}
		deleted = append(deleted, e.Step)
		status := "committed"
		if e.Status != 0 {
			status = e.Status.String()
		}
		m.log.Info("checkpoint deleted", "ckpt.step", e.Step, "status", status)
	}
	return deleted, errors.Join(errs...)
}

// retentionPlan picks the entries to delete. ents are sorted by step; the
// newest committed ones are classified, at least up to the keep-th valid
// one.
func retentionPlan(ents []*entry, keep int, every int64, exclude []int64) []*entry {
	var valid []int64 // newest first
	for i := len(ents) - 1; i >= 0; i-- {
		if ents[i].Status == StatusValid {
			valid = append(valid, ents[i].Step)
		}
	}
	if len(valid) == 0 {
		return nil
	}
	newest := valid[0]
	cutoff := int64(-1) // committed steps below it go
	if len(valid) >= keep {
		cutoff = valid[keep-1]
	}
	var del []*entry
	for _, e := range ents {
		switch {
		case slices.Contains(exclude, e.Step):
		case e.manifestKey == "":
			if e.Step < newest {
				del = append(del, e)
			}
		case e.Step < cutoff && !(every > 0 && e.Step%every == 0):
			del = append(del, e)
		}
	}
	return del
}

// deleteStep removes the manifest first (un-committing the step), then
// the other objects.
func (m *Manager) deleteStep(ctx context.Context, e *entry) error {
	del := func(ctx context.Context, key string) error {
		err := m.retry(ctx, "delete "+key, func() error { return m.store.Delete(ctx, key) })
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	if e.manifestKey != "" {
		if err := del(ctx, e.manifestKey); err != nil {
			return fmt.Errorf("checkpoint: delete step %d: %w", e.Step, err)
		}
	}
	keys := make([]string, 0, len(e.objects)+1)
	for _, o := range e.objects {
		keys = append(keys, o.Key)
	}
	if e.claimKey != "" {
		keys = append(keys, e.claimKey)
	}
	err := forEach(ctx, len(keys), m.opts.Concurrency, func(ctx context.Context, i int) error {
		return del(ctx, keys[i])
	})
	if err != nil {
		return fmt.Errorf("checkpoint: delete step %d: %w", e.Step, err)
	}
	return nil
}
