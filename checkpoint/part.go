package checkpoint

import (
	"fmt"
	"io"
	"path"
	"strings"
)

// Part is one named piece of a checkpoint: model weights, optimizer state,
// a data loader position. Build parts with [Bytes], [File] or [WriterFunc];
// Save captures their content before it returns.
type Part struct {
	name  string
	kind  partKind
	data  []byte
	path  string
	write func(io.Writer) error
}

type partKind int

const (
	partBytes partKind = iota + 1
	partFile
	partWriter
)

// Bytes is a part holding b. Save copies b into staging memory, so the
// caller may modify b as soon as Save returns.
func Bytes(name string, b []byte) Part { return Part{name: name, kind: partBytes, data: b} }

// File is a part holding the content of the file at path. Save copies the
// file into the staging directory (a reflink or in-kernel copy where the
// file system allows), so the caller may rewrite the file as soon as Save
// returns.
func File(name, path string) Part { return Part{name: name, kind: partFile, path: path} }

// WriterFunc is a part whose content fn writes. Save calls fn once, on the
// caller's goroutine, writing into staging memory; an error from fn fails
// the Save.
func WriterFunc(name string, fn func(io.Writer) error) Part {
	return Part{name: name, kind: partWriter, write: fn}
}

// Name returns the part's name.
func (p Part) Name() string { return p.name }

// Limits on part names.
const (
	maxPartName    = 1024
	maxPartSegment = 255
)

// ValidatePartName checks that name is usable as a part name everywhere a
// checkpoint may be stored or restored: a relative '/'-separated path whose
// segments use only the characters A-Z a-z 0-9 . _ -, do not start with '.'
// (which also rules out "." and ".."), and are at most 255 bytes (1024 in
// all). "MANIFEST.json", "CLAIM.json" and a first segment "rank-<n>" are
// reserved. The
// error wraps [ErrInvalidPart].
func ValidatePartName(name string) error {
	bad := func(why string) error { return fmt.Errorf("%w %q: %s", ErrInvalidPart, name, why) }
	switch {
	case name == "":
		return bad("empty name")
	case len(name) > maxPartName:
		return bad(fmt.Sprintf("longer than %d bytes", maxPartName))
	case strings.IndexByte(name, 0) >= 0:
		return bad("contains NUL")
	case strings.HasPrefix(name, "/") || strings.HasPrefix(name, `\`) || (len(name) >= 2 && name[1] == ':'):
		return bad("absolute path")
	case name == ManifestName || name == ClaimName:
		return bad("reserved name")
	}
	for i, seg := range strings.Split(name, "/") {
		switch {
		case seg == "":
			return bad("empty path segment")
		case seg == "." || seg == "..":
			return bad("'.' or '..' path segment")
		case seg[0] == '.':
			return bad("path segment starts with '.'")
		case len(seg) > maxPartSegment:
			return bad(fmt.Sprintf("path segment longer than %d bytes", maxPartSegment))
		case i == 0 && isRankDir(seg):
			return bad("rank-<n> is reserved for multi-node checkpoints")
		}
		for _, c := range []byte(seg) {
			if !partChar(c) {
				return bad(fmt.Sprintf("character %q outside A-Z a-z 0-9 . _ -", c))
			}
		}
	}
	return nil
}

func partChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
}

func isRankDir(seg string) bool {
	rest, ok := strings.CutPrefix(seg, "rank-")
	if !ok || rest == "" {
		return false
	}
	for _, c := range []byte(rest) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// validateParts checks names, uniqueness, and that no name is a directory
// of another ("a" and "a/b" cannot both be files on disk).
func validateParts(parts []Part) error {
	names := make(map[string]bool, len(parts))
	for _, p := range parts {
		if err := ValidatePartName(p.name); err != nil {
			return err
		}
		if names[p.name] {
			return fmt.Errorf("%w %q: duplicate name", ErrInvalidPart, p.name)
		}
		names[p.name] = true
		switch {
		case p.kind == partFile && p.path == "":
			return fmt.Errorf("%w %q: empty file path", ErrInvalidPart, p.name)
		case p.kind == partWriter && p.write == nil:
			return fmt.Errorf("%w %q: nil write function", ErrInvalidPart, p.name)
		case p.kind == 0:
			return fmt.Errorf("%w %q: zero Part (use Bytes, File or WriterFunc)", ErrInvalidPart, p.name)
		}
	}
	return checkDirConflicts(names)
}

func checkDirConflicts(names map[string]bool) error {
	for n := range names {
		for d := path.Dir(n); d != "."; d = path.Dir(d) {
			if names[d] {
				return fmt.Errorf("%w %q: %q is both a part and a directory of part %q", ErrInvalidPart, d, d, n)
			}
		}
	}
	return nil
}
