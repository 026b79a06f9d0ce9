package filestore

import (
	"errors"
	"io/fs"
	"strings"
	"syscall"
	"testing"
)

// Disk full cannot be produced on demand without a small file system, so
// the wrapping is checked on the errors the kernel would return.
func TestWrapErr(t *testing.T) {
	s := &Store{dir: "/data/ckpt"}
	for _, tc := range []struct {
		errno syscall.Errno
		hint  string
	}{
		{syscall.ENOSPC, "disk full: no space left on the device holding /data/ckpt"},
		{syscall.EDQUOT, "disk quota exceeded on /data/ckpt"},
		{syscall.EROFS, "/data/ckpt is on a read-only file system"},
		{syscall.EACCES, "permission denied under /data/ckpt"},
		{syscall.EIO, ""},
	} {
		cause := &fs.PathError{Op: "write", Path: "/data/ckpt/k/.spotsafe-tmp-1", Err: tc.errno}
		err := s.wrapErr("put", "k", cause)
		if !errors.Is(err, tc.errno) {
			t.Errorf("%v: wrapped error %v does not match the errno", tc.errno, err)
		}
		var pe *fs.PathError
		if !errors.As(err, &pe) {
			t.Errorf("%v: wrapped error lost the *fs.PathError", tc.errno)
		}
		if !strings.HasPrefix(err.Error(), "filestore: put k: ") {
			t.Errorf("%v: message %q lacks the operation and key", tc.errno, err)
		}
		if tc.hint != "" && !strings.Contains(err.Error(), tc.hint) {
			t.Errorf("%v: message %q lacks %q", tc.errno, err, tc.hint)
		}
		if tc.hint == "" && strings.Count(err.Error(), ":") > 4 {
			t.Errorf("%v: unexpected hint in %q", tc.errno, err)
		}
	}
}
