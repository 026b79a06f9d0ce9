package providers_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/notice/noticetest"
	"github.com/spotsafe/spotsafe/providers"
)

// env is a fake environment for DetectOptions.Getenv.
func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// dmi writes SMBIOS files into a temp dir.
func dmi(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, v := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644))
	}
	return dir
}

// unusedURL is a loopback address nothing listens on.
func unusedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return "http://" + addr
}

func newFake(t *testing.T, provider string) noticetest.Fake {
	t.Helper()
	f, err := noticetest.New(provider, nil)
	require.NoError(t, err)
	t.Cleanup(f.Close)
	return f
}

func detect(t *testing.T, o providers.DetectOptions) (*providers.Detection, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if o.Getenv == nil {
		o.Getenv = env()
	}
	if o.DMIRoot == "" {
		o.DMIRoot = t.TempDir() // no DMI strings: never the host's
	}
	return providers.Detect(ctx, &o)
}

func TestEnvOverride(t *testing.T) {
	for _, p := range providers.Names() {
		t.Run(p, func(t *testing.T) {
			start := time.Now()
			d, err := detect(t, providers.DetectOptions{
				Getenv:   env(providers.EnvProvider, p),
				Endpoint: unusedURL(t), // nothing answers: the variable is believed as is
			})
			require.NoError(t, err)
			assert.Equal(t, p, d.Provider)
			assert.Equal(t, providers.ViaEnv, d.Via)
			assert.Equal(t, p, d.Source.Name())
			assert.Less(t, time.Since(start), 100*time.Millisecond, "no probing")
		})
	}
	t.Run("none", func(t *testing.T) {
		_, err := detect(t, providers.DetectOptions{Getenv: env(providers.EnvProvider, "none")})
		require.ErrorIs(t, err, providers.ErrNoCloud)
	})
	t.Run("bogus", func(t *testing.T) {
		_, err := detect(t, providers.DetectOptions{Getenv: env(providers.EnvProvider, "digitalocean")})
		require.Error(t, err)
		assert.NotErrorIs(t, err, providers.ErrNoCloud)
		assert.Contains(t, err.Error(), "digitalocean")
	})
	t.Run("endpoint from env", func(t *testing.T) {
		f := newFake(t, "tencent")
		d, err := detect(t, providers.DetectOptions{Getenv: env(providers.EnvProvider, "Tencent", providers.EnvEndpoint, f.URL())})
		require.NoError(t, err)
		assert.Equal(t, f.URL(), d.Endpoint)
		f.Interrupt(notice.KindTerminate, time.Now().Add(time.Minute).Truncate(time.Second))
		ns, err := d.Source.Poll(context.Background())
		require.NoError(t, err)
		assert.Len(t, ns, 1)
	})
}

func TestDMI(t *testing.T) {
	for _, tc := range []struct {
		files map[string]string
		want  string
	}{
		{map[string]string{"sys_vendor": "Amazon EC2", "product_name": "m5.large"}, "aws"},
		{map[string]string{"bios_vendor": "Amazon EC2"}, "aws"},
		{map[string]string{"product_name": "Google Compute Engine", "sys_vendor": "Google"}, "gcp"},
		{map[string]string{"chassis_asset_tag": "7783-7084-3265-9085-8269-3286-77", "sys_vendor": "Microsoft Corporation"}, "azure"},
		{map[string]string{"sys_vendor": "Alibaba Cloud", "product_name": "Alibaba Cloud ECS"}, "alibaba"},
		{map[string]string{"product_name": "Alibaba Cloud ECS"}, "alibaba"},
		{map[string]string{"sys_vendor": "Tencent Cloud", "product_name": "CVM"}, "tencent"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			d, err := detect(t, providers.DetectOptions{DMIRoot: dmi(t, tc.files)})
			require.NoError(t, err)
			assert.Equal(t, tc.want, d.Provider)
			assert.Equal(t, providers.ViaDMI, d.Via)
			assert.Equal(t, providers.DefaultEndpoint(tc.want), d.Endpoint)
			assert.Contains(t, d.Evidence, "DMI")
		})
	}
	t.Run("oracle", func(t *testing.T) {
		_, err := detect(t, providers.DetectOptions{DMIRoot: dmi(t, map[string]string{"chassis_asset_tag": "OracleCloud.com"})})
		require.ErrorIs(t, err, providers.ErrNoCloud)
		assert.Contains(t, err.Error(), "Oracle")
	})
	t.Run("env beats DMI", func(t *testing.T) {
		d, err := detect(t, providers.DetectOptions{
			DMIRoot: dmi(t, map[string]string{"sys_vendor": "Alibaba Cloud"}),
			Getenv:  env(providers.EnvProvider, "tencent"),
		})
		require.NoError(t, err)
		assert.Equal(t, "tencent", d.Provider)
	})
	t.Run("endpoint override skips DMI", func(t *testing.T) {
		f := newFake(t, "tencent")
		d, err := detect(t, providers.DetectOptions{
			DMIRoot:  dmi(t, map[string]string{"sys_vendor": "Alibaba Cloud"}),
			Endpoint: f.URL(),
		})
		require.NoError(t, err)
		assert.Equal(t, "tencent", d.Provider)
		assert.Equal(t, providers.ViaProbe, d.Via)
	})
	t.Run("unknown vendor", func(t *testing.T) {
		start := time.Now()
		_, err := detect(t, providers.DetectOptions{
			DMIRoot:   dmi(t, map[string]string{"sys_vendor": "QEMU", "product_name": "Standard PC (Q35 + ICH9, 2009)"}),
			Endpoints: unusedEndpoints(t),
		})
		require.ErrorIs(t, err, providers.ErrNoCloud)
		assert.Less(t, time.Since(start), 1500*time.Millisecond)
	})
}

func unusedEndpoints(t *testing.T) map[string]string {
	m := map[string]string{}
	for _, p := range providers.Names() {
		m[p] = unusedURL(t)
	}
	return m
}

// Each fake is recognised by its own provider's probe, and Detect returns a
// working source for it.
func TestProbeFindsEachFake(t *testing.T) {
	for _, p := range noticetest.Providers() {
		t.Run(p, func(t *testing.T) {
			f, err := noticetest.New(p, nil)
			require.NoError(t, err)
			t.Cleanup(f.Close)
			start := time.Now()
			d, err := detect(t, providers.DetectOptions{Endpoint: f.URL()})
			require.NoError(t, err)
			assert.Equal(t, p, d.Provider)
			assert.Equal(t, providers.ViaProbe, d.Via)
			assert.Equal(t, f.URL(), d.Endpoint)
			assert.Less(t, time.Since(start), time.Second)

			kind := mainKind(p)
			deadline := time.Now().Add(2 * time.Minute).Truncate(time.Second)
			f.Interrupt(kind, deadline)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			ns, err := d.Source.Poll(ctx)
			require.NoError(t, err)
			require.Len(t, ns, 1)
			assert.Equal(t, p, ns[0].Provider)
			assert.Equal(t, kind, ns[0].Kind)
		})
	}
}

// No provider's probe claims another provider's fake: detection must never
// guess, even when every provider is pointed at the same endpoint.
func TestProbesAreSpecific(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, fp := range noticetest.Providers() {
		f, err := noticetest.New(fp, nil)
		require.NoError(t, err)
		t.Cleanup(f.Close)
		for _, sp := range providers.Names() {
			src, err := providers.NewSource(sp, &providers.SourceOptions{Endpoint: f.URL()})
			require.NoError(t, err)
			pr, ok := src.(interface{ Probe(context.Context) error })
			require.True(t, ok, "%s source has no Probe", sp)
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			err = pr.Probe(pctx)
			pcancel()
			if sp == fp {
				assert.NoError(t, err, "%s probe against its own fake", sp)
			} else {
				assert.Error(t, err, "%s probe claimed the %s fake", sp, fp)
			}
		}
	}
}

func TestNothingAnswers(t *testing.T) {
	start := time.Now()
	_, err := detect(t, providers.DetectOptions{Endpoint: unusedURL(t)})
	el := time.Since(start)
	require.ErrorIs(t, err, providers.ErrNoCloud)
	assert.Contains(t, err.Error(), "SPOTSAFE_PROVIDER")
	assert.Less(t, el, 1500*time.Millisecond)
}

// A server that accepts connections but never answers: every probe gives up
// after ProbeTimeout, all at once.
func TestHangingServer(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	start := time.Now()
	_, err := detect(t, providers.DetectOptions{Endpoint: srv.URL, ProbeTimeout: 300 * time.Millisecond})
	el := time.Since(start)
	require.ErrorIs(t, err, providers.ErrNoCloud)
	assert.Less(t, el, 1500*time.Millisecond)
	assert.GreaterOrEqual(t, el, 250*time.Millisecond)
}

func TestDetectCanceled(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := providers.Detect(ctx, &providers.DetectOptions{Endpoint: srv.URL, Getenv: env(), DMIRoot: t.TempDir(), ProbeTimeout: 5 * time.Second})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.NotErrorIs(t, err, providers.ErrNoCloud)
}

func TestNewSource(t *testing.T) {
	for _, p := range providers.Names() {
		src, err := providers.NewSource(p, nil)
		require.NoError(t, err, p)
		assert.Equal(t, p, src.Name())
		assert.NotEmpty(t, providers.DefaultEndpoint(p))
	}
	_, err := providers.NewSource("signal", nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "aws, gcp, azure, alibaba, tencent")
}

// mainKind is the notice each fake serves for its usual interruption.
func mainKind(p string) notice.Kind {
	switch p {
	case "gcp", "azure":
		return notice.KindPreempt
	}
	return notice.KindTerminate
}

// Detect leaves no connection open behind it: not the probes' (finished or
// cancelled mid-dial), which would otherwise sit in transports nobody uses
// any more. A counting TCP relay in front of each fake sees every
// connection.
func TestDetectLeavesNoConnections(t *testing.T) {
	for _, p := range noticetest.Providers() {
		t.Run(p, func(t *testing.T) {
			f := newFake(t, p)
			relay := newRelay(t, strings.TrimPrefix(f.URL(), "http://"))
			for range 10 {
				d, err := detect(t, providers.DetectOptions{Endpoint: relay.url})
				require.NoError(t, err)
				require.Equal(t, p, d.Provider)
			}
			require.Eventually(t, func() bool { return relay.open.Load() == 0 }, time.Second, 10*time.Millisecond,
				"%d connections still open after Detect returned", relay.open.Load())
			assert.GreaterOrEqual(t, relay.total.Load(), int64(10))
		})
	}
}

// relay forwards TCP connections to a backend and counts them.
type relay struct {
	url         string
	open, total atomic.Int64
}

func newRelay(t *testing.T, backend string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := &relay{url: "http://" + ln.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.open.Add(1)
			r.total.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer r.open.Add(-1)
				defer c.Close()
				b, err := net.Dial("tcp", backend)
				if err != nil {
					return
				}
				defer b.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(b, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, b); done <- struct{}{} }()
				<-done // either side closed: drop both
				c.Close()
				b.Close()
				<-done
			}()
		}
	}()
	return r
}
