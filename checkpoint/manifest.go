package checkpoint

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Names and versions of the on-store format.
const (
	// ManifestName is the object that commits a step:
	// <prefix>/<step>/MANIFEST.json.
	ManifestName = "MANIFEST.json"
	// FormatName is the manifest's "format" field.
	FormatName = "spotsafe-checkpoint"
	// FormatVersion is the manifest version this package writes and the
	// newest it reads. Additive changes (new optional fields) keep the
	// version; readers ignore fields they do not know.
	FormatVersion = 1
	// stepWidth is the zero-padded width of step directories, so that
	// lexical order is numeric order for steps below 10^12; wider steps
	// still work (the Manager always sorts numerically).
	stepWidth = 12
)

// Manifest is the commit record of one checkpoint, stored as JSON in
// <prefix>/<step>/MANIFEST.json after every part is stored.
//
// Reserved for planned features (not written by version 1; readers of
// version 1 ignore them):
//   - "ranks": multi-node checkpoints, where rank r stores its parts under
//     <step>/rank-<r>/ with its own rank-<r>/MANIFEST.json, and a
//     coordinator writes the global manifest last. The global "parts" list
//     will name every part by its path under the step ("rank-3/model.bin"),
//     so that version 1 readers can still restore and verify it.
//   - "writer.epoch": a writer fencing token (run epoch), so that an old
//     instance still finishing cannot commit over a newer run's steps.
type Manifest struct {
	// Format is always [FormatName].
	Format string `json:"format"`
	// Version is the format version, [FormatVersion].
	Version int `json:"version"`
	// Step is the training step (equal to the step directory's number).
	Step int64 `json:"step"`
	// Created is when the state was captured (UTC).
	Created time.Time `json:"created"`
	// Parts lists every part, in the order given to Save.
	Parts []PartInfo `json:"parts"`
	// Metadata is the caller's own key/value data (Snapshot.Metadata).
	Metadata map[string]string `json:"metadata,omitempty"`
	// Writer identifies the process that wrote the checkpoint.
	Writer Writer `json:"writer"`
}

// PartInfo describes one stored part.
type PartInfo struct {
	// Name is the part's path under the step directory.
	Name string `json:"name"`
	// Size in bytes.
	Size int64 `json:"size"`
	// CRC32C is the CRC-32 (Castagnoli polynomial, as used by GCS, S3 and
	// iSCSI) of the part's bytes.
	CRC32C uint32 `json:"crc32c"`
}

// Writer identifies the process that wrote a checkpoint.
type Writer struct {
	Host string `json:"host,omitempty"`
	PID  int    `json:"pid,omitempty"`
	// RunID is ManagerOptions.RunID, or a random id per Manager.
	RunID string `json:"run_id,omitempty"`
}

// Bytes returns the total size of the parts.
func (m *Manifest) Bytes() int64 {
	var n int64
	for _, p := range m.Parts {
		n += p.Size
	}
	return n
}

// Part returns the named part's entry.
func (m *Manifest) Part(name string) (PartInfo, bool) {
	for _, p := range m.Parts {
		if p.Name == name {
			return p, true
		}
	}
	return PartInfo{}, false
}

// parseManifest decodes and checks a manifest read from the directory of
// step. Everything in it is untrusted: part names are validated as strictly
// as at Save, so that a restore can never write outside its directory.
func parseManifest(data []byte, step int64) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, &CorruptError{Step: step, Reason: "unparseable", Err: err}
	}
	bad := func(format string, args ...any) error {
		return &CorruptError{Step: step, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case m.Format != FormatName:
		return nil, bad("format %q, want %q", m.Format, FormatName)
	case m.Version < 1 || m.Version > FormatVersion:
		return nil, bad("unsupported format version %d (this reader knows 1..%d)", m.Version, FormatVersion)
	case m.Step != step:
		return nil, bad("manifest says step %d", m.Step)
	}
	names := make(map[string]bool, len(m.Parts))
	for _, p := range m.Parts {
		if err := ValidatePartName(p.Name); err != nil {
			return nil, &CorruptError{Step: step, Reason: "bad part name", Err: err}
		}
		if names[p.Name] {
			return nil, bad("duplicate part %q", p.Name)
		}
		names[p.Name] = true
		if p.Size < 0 {
			return nil, bad("part %q has negative size %d", p.Name, p.Size)
		}
	}
	if err := checkDirConflicts(names); err != nil {
		return nil, &CorruptError{Step: step, Reason: "bad part names", Err: err}
	}
	return &m, nil
}

// stepDir formats a step as its directory name.
func stepDir(step int64) string {
	return fmt.Sprintf("%0*d", stepWidth, step)
}

// parseStepDir parses a directory name written by stepDir; anything else
// (including non-canonical numbers such as "12") is not a step directory.
func parseStepDir(s string) (int64, bool) {
	if len(s) < stepWidth {
		return 0, false
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || stepDir(n) != s {
		return 0, false
	}
	return n, true
}
