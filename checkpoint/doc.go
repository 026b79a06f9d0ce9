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
package checkpoint
