package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
)

// Sentinel errors of the [Manager]. Errors returned by the Manager wrap them,
// so test with errors.Is.
var (
	// ErrNoCheckpoint means there is no committed checkpoint to restore
	// (or none that verifies; the error then also wraps the [CorruptError]s
	// of the ones skipped).
	ErrNoCheckpoint = errors.New("checkpoint: no checkpoint")
	// ErrStepExists means the step is already committed: by an earlier
	// save, or by another writer that won the race to commit it. It
	// matches fs.ErrExist too.
	ErrStepExists = fmt.Errorf("checkpoint: step already committed: %w", fs.ErrExist)
	// ErrIncomplete means a step has objects but no manifest: an upload in
	// progress or the leftover of an interrupted one. It is not corruption.
	ErrIncomplete = errors.New("checkpoint: incomplete (no manifest)")
	// ErrCorrupt is matched by every [CorruptError].
	ErrCorrupt = errors.New("checkpoint: corrupt")
	// ErrInvalidPart is returned for a part name that is not a safe
	// relative path (see [ValidatePartName]), a duplicate name, or a bad
	// part value.
	ErrInvalidPart = errors.New("checkpoint: invalid part")
	// ErrBusy is returned by Save under [BusySkip] when an upload is in
	// flight; nothing was captured.
	ErrBusy = errors.New("checkpoint: an upload is in flight")
	// ErrPreviousFailed is returned by Save when the previous upload
	// failed and nobody had seen its error yet (through [Upload.Wait]).
	// The error also wraps that failure; the new state was not saved, so
	// call Save again to save it.
	ErrPreviousFailed = errors.New("checkpoint: previous save failed")
	// ErrCanceled ends an upload abandoned with [Upload.Cancel]. It
	// matches context.Canceled too.
	ErrCanceled = fmt.Errorf("checkpoint: upload canceled: %w", context.Canceled)
	// ErrSuperseded ends an upload replaced by a newer Save under
	// [BusyReplace] or [BusyCancel]. It matches context.Canceled too.
	ErrSuperseded = fmt.Errorf("checkpoint: superseded by a newer save: %w", context.Canceled)
	// ErrClosed is returned by Save after Close.
	ErrClosed = errors.New("checkpoint: manager closed")
)

// CorruptError says why a committed checkpoint failed verification. It
// matches [ErrCorrupt].
type CorruptError struct {
	Step int64
	// Part is the part that failed, or "" when the manifest itself is
	// unreadable.
	Part string
	// Reason is a human-readable description ("crc32c 0x1a2b3c4d, manifest
	// says 0x...").
	Reason string
	// Err is the underlying error, if any (fs.ErrNotExist for a missing
	// part, the JSON error for a bad manifest).
	Err error
}

// Error describes the corruption.
func (e *CorruptError) Error() string {
	what := "manifest"
	if e.Part != "" {
		what = fmt.Sprintf("part %q", e.Part)
	}
	msg := fmt.Sprintf("checkpoint: step %d: %s corrupt: %s", e.Step, what, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is reports whether target is [ErrCorrupt].
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// Unwrap returns the underlying error.
func (e *CorruptError) Unwrap() error { return e.Err }

// SaveError is the error of a failed upload: which step, and which part
// when one part's transfer failed.
type SaveError struct {
	Step int64
	// Part is the part whose upload failed; "" for failures of the whole
	// step (commit, cancellation, deadline).
	Part string
	Err  error
}

// Error describes the failed save.
func (e *SaveError) Error() string {
	if e.Part != "" {
		return fmt.Sprintf("checkpoint: save step %d: part %q: %v", e.Step, e.Part, e.Err)
	}
	return fmt.Sprintf("checkpoint: save step %d: %v", e.Step, e.Err)
}

// Unwrap returns the underlying error.
func (e *SaveError) Unwrap() error { return e.Err }
