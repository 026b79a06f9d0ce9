package main

import "github.com/spotsafe/spotsafe/notice/noticetest"

// pendingProvider reports a provider whose fake has not landed yet.
func pendingProvider(p string) bool {
	f, err := noticetest.New(p, nil)
	if err != nil {
		return true
	}
	f.Close()
	return false
}
