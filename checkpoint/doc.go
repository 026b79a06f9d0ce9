// Package checkpoint saves training or inference state without stopping the
// work, commits it atomically, and restores the newest checkpoint that
// verifies.
//
// A checkpoint is a directory of parts under a zero-padded step,
// <prefix>/<step>/<part>, committed by writing <prefix>/<step>/MANIFEST.json
// last and conditionally: a checkpoint exists if and only if its manifest
// exists and parses, and its parts are verified (size and CRC32C) on read.
//
// Storage is pluggable through the small [Store] driver interface; stores
// live in sub-packages and register URL schemes for [Open].
//
// # Saving and restoring
//
// A [Manager] does the work. [Manager.Save] (or [Manager.SaveSnapshot],
// which adds metadata, a deadline and a per-save busy policy) copies the
// parts ([Bytes], [File], [WriterFunc]) into pooled staging memory and
// returns an [Upload] at once; the upload runs in the background, parts in
// parallel with retries, and commits the manifest last. Errors come back
// from [Upload.Wait], else from the next Save, else from [Manager.Close];
// none is dropped. At most one upload runs at a time; [BusyPolicy] says what
// a Save arriving meanwhile does.
//
// [Manager.Latest] returns the newest committed checkpoint whose parts all
// verify, falling back past corrupt ones; [Manager.RestoreTo] writes one
// into a directory. [Manager.List], [Manager.Verify] and [Manager.Prune]
// inspect and clean up; retention runs after every commit.
//
// The layout, the manifest format, the guarantees after a crash and the
// measured costs are described in docs/checkpoints.md.
package checkpoint
