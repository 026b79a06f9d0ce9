package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/notice/noticetest"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader in different
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fakeRun is a `spotsafe fake` running in process.
type fakeRun struct {
	url      string
	appear   time.Time
	deadline time.Time
	stop     func() int
}

var (
	urlLine      = regexp.MustCompile(`listening on (\S+)`)
	scheduleLine = regexp.MustCompile(`will appear at (\S+) .* with deadline (\S+)`)
)

// startFake runs `spotsafe fake args...` and reads its URL (and schedule,
// when --interrupt-in is given) from its output.
func startFake(t *testing.T, args ...string) *fakeRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	code := make(chan int, 1)
	var stderr syncBuffer
	go func() {
		code <- run(ctx, append([]string{"fake"}, args...), pw, &stderr)
		pw.Close()
	}()
	fr := &fakeRun{}
	// Buffered beyond what the fake prints, so that the scanner never
	// blocks once the test stops reading.
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	interrupt := strings.Contains(strings.Join(args, " "), "--interrupt-in")
	timeout := time.After(5 * time.Second)
	for fr.url == "" || (interrupt && fr.deadline.IsZero()) {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "fake ended early; stderr: %s", stderr.String())
			if m := urlLine.FindStringSubmatch(l); m != nil {
				fr.url = m[1]
			}
			if m := scheduleLine.FindStringSubmatch(l); m != nil {
				var err error
				fr.appear, err = time.Parse(time.RFC3339, m[1])
				require.NoError(t, err)
				fr.deadline, err = time.Parse(time.RFC3339, m[2])
				require.NoError(t, err)
			}
		case <-timeout:
			t.Fatalf("fake printed no URL; stderr: %s", stderr.String())
		}
	}
	var once sync.Once
	var rc int
	fr.stop = func() int {
		once.Do(func() {
			cancel()
			rc = <-code
		})
		return rc
	}
	t.Cleanup(func() { fr.stop() })
	return fr
}

type watchLine struct {
	Event            string            `json:"event"`
	Provider         string            `json:"provider"`
	Kind             string            `json:"kind"`
	ID               string            `json:"id"`
	Final            *bool             `json:"final"`
	Deadline         string            `json:"deadline"`
	Observed         string            `json:"observed"`
	RemainingSeconds *float64          `json:"remaining_seconds"`
	Detail           map[string]string `json:"detail"`
}

// The acceptance scenario of docs/cli-watch.md: a fake with an interruption
// one second out, and a watcher that prints it as JSON.
func TestFakeThenWatchJSON(t *testing.T) {
	for _, p := range []string{"aws", "tencent"} {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			fr := startFake(t, p, "--listen", "127.0.0.1:0", "--interrupt-in", "1s")
			var stdout, stderr syncBuffer
			start := time.Now()
			code := run(context.Background(), []string{"watch", "--provider", p, "--endpoint", fr.url, "--for", "3s", "--json"}, &stdout, &stderr)
			require.Equal(t, 0, code, "stderr: %s", stderr.String())
			assert.InDelta(t, 3, time.Since(start).Seconds(), 0.5, "--for 3s")

			out := strings.TrimSpace(stdout.String())
			require.NotEmpty(t, out, "no event; stderr: %s", stderr.String())
			lines := strings.Split(out, "\n")
			require.Len(t, lines, 1, "want exactly one event: %s", out)
			var l watchLine
			require.NoError(t, json.Unmarshal([]byte(lines[0]), &l), lines[0])
			assert.Equal(t, "notice", l.Event)
			assert.Equal(t, p, l.Provider)
			assert.Equal(t, "terminate", l.Kind)
			require.NotNil(t, l.Final)
			assert.True(t, *l.Final)
			assert.NotEmpty(t, l.ID)
			require.NotNil(t, l.Detail)

			deadline, err := time.Parse(time.RFC3339Nano, l.Deadline)
			require.NoError(t, err)
			assert.True(t, deadline.Equal(fr.deadline), "deadline %v, fake's %v", deadline, fr.deadline)
			observed, err := time.Parse(time.RFC3339Nano, l.Observed)
			require.NoError(t, err)
			assert.True(t, strings.HasSuffix(l.Observed, "Z") && strings.Contains(l.Observed, "."), "observed %q: RFC 3339 UTC with fraction", l.Observed)
			lag := observed.Sub(fr.appear)
			// appear is printed with microseconds, so a lag can be a hair
			// below zero only through clock reading order; allow 10 ms.
			assert.True(t, lag > -10*time.Millisecond && lag < 1100*time.Millisecond, "observed %v after the trigger", lag)
			require.NotNil(t, l.RemainingSeconds)
			assert.InDelta(t, deadline.Sub(observed).Seconds(), *l.RemainingSeconds, 1.0)

			assert.Contains(t, stderr.String(), "watching "+p+" at "+fr.url)
			assert.Equal(t, 0, fr.stop())
		})
	}
}

// Human output, auto-detection against a fake, and a cancellation.
func TestWatchHumanAutoDetect(t *testing.T) {
	t.Setenv("SPOTSAFE_PROVIDER", "") // detection must not be forced by the machine's environment
	fr := startFake(t, "alibaba", "--listen", "127.0.0.1:0", "--interrupt-in", "200ms")
	var stdout, stderr syncBuffer
	code := run(context.Background(), []string{"watch", "--endpoint", fr.url, "--for", "1500ms"}, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr: %s", stderr.String())
	out := stdout.String()
	assert.Regexp(t, `(?m)^\S+Z NOTICE\s+alibaba terminate \(final\) deadline \S+ \(\S+ left\) id=alibaba/terminate/\S+ termination_time="\S+Z"$`, out)
	assert.NotContains(t, out, "raw=", "the raw body is for --json")
	assert.Contains(t, stderr.String(), "watching alibaba at "+fr.url+" (detected: ")
}

// A notice that disappears is printed as canceled; Ctrl-C then ends the
// watch with exit 0.
func TestWatchCanceledThenCtrlC(t *testing.T) {
	f, err := noticetest.NewTencent(nil)
	require.NoError(t, err)
	t.Cleanup(f.Close)
	f.Interrupt(notice.KindTerminate, time.Now().Add(2*time.Minute))
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"watch", "--provider", "tencent", "--endpoint", f.URL(), "--json"}, &stdout, &stderr)
	}()
	require.Eventually(t, func() bool { return strings.Contains(stdout.String(), `"event":"notice"`) }, 5*time.Second, 20*time.Millisecond)
	f.Clear()
	require.Eventually(t, func() bool { return strings.Contains(stdout.String(), `"event":"canceled"`) }, 5*time.Second, 20*time.Millisecond)
	cancel()
	select {
	case code := <-done:
		assert.Equal(t, 0, code, "Ctrl-C is a normal end")
	case <-time.After(3 * time.Second):
		t.Fatal("watch did not stop on cancel")
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	require.Len(t, lines, 2)
	var first, second watchLine
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &first))
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &second))
	assert.Equal(t, first.ID, second.ID)
	assert.Equal(t, "canceled", second.Event)
}

// A metadata server that stops answering shows up on stderr as degraded.
func TestWatchDegraded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	var stdout, stderr syncBuffer
	code := run(context.Background(), []string{"watch", "--provider", "tencent", "--endpoint", "http://" + addr, "--for", "2s"}, &stdout, &stderr)
	require.Equal(t, 0, code)
	assert.Empty(t, stdout.String())
	assert.Contains(t, stderr.String(), "tencent metadata DEGRADED")
}

func TestWatchNoCloud(t *testing.T) {
	t.Setenv("SPOTSAFE_PROVIDER", "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	var stdout, stderr syncBuffer
	start := time.Now()
	code := run(context.Background(), []string{"watch", "--endpoint", "http://" + addr}, &stdout, &stderr)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), "SPOTSAFE_PROVIDER")
	assert.Less(t, time.Since(start), 2*time.Second)
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"watch", "--provider", "digitalocean"},
		{"watch", "--for", "soon"},
		{"watch", "--for", "-1s"},
		{"watch", "--endpoint", "169.254.169.254"},
		{"watch", "--endpoint", "http://127.0.0.1:1/latest"},
		{"watch", "--bogus"},
		{"watch", "extra"},
		{"fake"},
		{"fake", "digitalocean"},
		{"fake", "alibaba", "tencent"},
		{"fake", "alibaba", "--kind", "explode"},
		{"fake", "alibaba", "--interrupt-in", "-3s"},
		{"fake", "alibaba", "--interrupt-in", "later"},
	} {
		var stdout, stderr syncBuffer
		code := run(context.Background(), args, &stdout, &stderr)
		assert.Equal(t, 2, code, "%v: stderr %s", args, stderr.String())
		assert.Contains(t, stderr.String(), "usage: spotsafe "+args[0], "%v", args)
		assert.Empty(t, stdout.String(), "%v", args)
	}
}

func TestHelp(t *testing.T) {
	for _, cmd := range []string{"watch", "fake"} {
		var stdout, stderr syncBuffer
		code := run(context.Background(), []string{cmd, "-h"}, &stdout, &stderr)
		assert.Equal(t, 0, code)
		assert.Contains(t, stderr.String(), "usage: spotsafe "+cmd)
	}
}

// The fake refuses an address in use with a plain error (exit 1).
func TestFakeListenError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var stdout, stderr syncBuffer
	code := run(context.Background(), []string{"fake", "tencent", "--listen", ln.Addr().String()}, &stdout, &stderr)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), "listen")
}

// Without --interrupt-in the fake serves no notice; it prints how to point
// a program at it, including the cloud SDK variable where there is one.
func TestFakeOutput(t *testing.T) {
	fr := startFake(t, "alibaba", "--listen", "127.0.0.1:0")
	var stdout, stderr syncBuffer
	code := run(context.Background(), []string{"watch", "--provider", "alibaba", "--endpoint", fr.url, "--for", "300ms", "--json"}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	assert.Empty(t, stdout.String(), "no notice scheduled")
	assert.Equal(t, 0, fr.stop())
}
