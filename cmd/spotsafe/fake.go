package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/notice/noticetest"
)

// defaultFakeListen is where `spotsafe fake` listens unless told otherwise.
const defaultFakeListen = "127.0.0.1:8169"

// runFake serves a provider's fake metadata server until interrupted, with
// an optional simulated interruption.
func runFake(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	const usage = "fake PROVIDER [--listen ADDR] [--interrupt-in DURATION] [--kind KIND]"
	fs := flag.NewFlagSet("fake", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	listen := fs.String("listen", defaultFakeListen, "address to listen on (port 0 picks a free one)")
	in := fs.Duration("interrupt-in", -1, "make a notice appear after this long (default: never)")
	kindName := fs.String("kind", "", "kind of the notice (default: the provider's usual interruption)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return noticeCmdFlagError(fs, err, stderr, usage)
	}
	if len(pos) != 1 {
		return usageError(fmt.Sprintf("want exactly one PROVIDER (%s), got %d arguments", strings.Join(noticetest.Providers(), ", "), len(pos)))
	}
	provider := pos[0]
	if !slices.Contains(noticetest.Providers(), provider) {
		return usageError(fmt.Sprintf("unknown provider %q (want one of %s)", provider, strings.Join(noticetest.Providers(), ", ")))
	}
	kind := fakeDefaultKind(provider)
	if *kindName != "" {
		if kind, err = notice.ParseKind(strings.ToLower(*kindName)); err != nil {
			return usageError(err.Error())
		}
	}
	interrupt := false
	fs.Visit(func(f *flag.Flag) { interrupt = interrupt || f.Name == "interrupt-in" })
	if interrupt && *in < 0 {
		return usageError(fmt.Sprintf("--interrupt-in %v is negative", *in))
	}

	f, err := noticetest.New(provider, &noticetest.ServerOptions{Listen: *listen})
	if err != nil {
		return err
	}
	defer f.Close()

	u := f.URL()
	fmt.Fprintf(stdout, "spotsafe fake: %s metadata server listening on %s\n", provider, u)
	fmt.Fprintf(stdout, "point a program at it:\n")
	fmt.Fprintf(stdout, "  export SPOTSAFE_PROVIDER=%s SPOTSAFE_ENDPOINT=%s\n", provider, u)
	fmt.Fprintf(stdout, "  spotsafe watch --provider %s --endpoint %s\n", provider, u)
	if hint := sdkHint(provider, u); hint != "" {
		fmt.Fprintf(stdout, "  %s\n", hint)
	}

	if !interrupt {
		fmt.Fprintf(stdout, "spotsafe fake: no notice scheduled (use --interrupt-in); Ctrl-C to stop\n")
		<-ctx.Done()
		fmt.Fprintf(stdout, "spotsafe fake: stopped after %d requests\n", f.Requests())
		return nil
	}

	appear := time.Now().Add(*in)
	// Whole seconds: most protocols carry the deadline to the second, and
	// the fake's deadline must be what a client reads.
	deadline := appear.Add(noticetest.NominalNotice(provider, kind)).Truncate(time.Second)
	f.Schedule(kind, appear, deadline)
	fmt.Fprintf(stdout, "spotsafe fake: %s notice will appear at %s (in %s) with deadline %s\n",
		kind, watchTime(appear), *in, deadline.UTC().Format(time.RFC3339))

	t := time.NewTimer(time.Until(appear))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
		fmt.Fprintf(stdout, "spotsafe fake: %s notice is now served (deadline in %s); Ctrl-C to stop\n",
			kind, time.Until(deadline).Round(time.Second))
		<-ctx.Done()
	}
	fmt.Fprintf(stdout, "spotsafe fake: stopped after %d requests\n", f.Requests())
	return nil
}

// fakeDefaultKind is the provider's usual final notice: the one a spot
// instance gets.
func fakeDefaultKind(provider string) notice.Kind {
	switch provider {
	case "gcp", "azure":
		return notice.KindPreempt
	}
	return notice.KindTerminate
}

// sdkHint names the variable the cloud's own SDKs read to find a metadata
// server, when there is one.
func sdkHint(provider, base string) string {
	switch provider {
	case "aws":
		return "export AWS_EC2_METADATA_SERVICE_ENDPOINT=" + base + "   # AWS SDKs"
	case "gcp":
		if u, err := url.Parse(base); err == nil {
			return "export GCE_METADATA_HOST=" + u.Host + "   # Google client libraries"
		}
	}
	return ""
}
