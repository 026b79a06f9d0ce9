package gcsstore

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"cloud.google.com/go/storage"
	"google.golang.org/api/option"

	"github.com/spotsafe/spotsafe/checkpoint"
)

func init() {
	checkpoint.Register("gs", func(ctx context.Context, u *url.URL) (checkpoint.Store, error) {
		return OpenURL(ctx, u)
	})
}

// OpenURL opens the store a gs:// URL names:
//
//	gs://BUCKET[/PREFIX][?PARAM=VALUE&...]
//
// Parameters:
//
//	endpoint=URL              talk to an emulator such as fake-gcs-server
//	                          (http://host:port; "/storage/v1/" is added),
//	                          without authentication
//	chunk_size=SIZE           Options.ChunkSize
//	parallel_threshold=SIZE   Options.ParallelThreshold (-1 disables)
//	part_size=SIZE            Options.PartSize
//	concurrency=N             Options.Concurrency
//
// SIZE is a byte count with an optional K, M or G suffix (powers of 1024).
// Without endpoint, the client uses STORAGE_EMULATOR_HOST when set (as the
// SDK documents) and Application Default Credentials otherwise. Reads use
// the JSON API, which the SDK recommends and emulators need. The Store owns
// its client: Close it when done.
func OpenURL(ctx context.Context, u *url.URL) (*Store, error) {
	if u.Scheme != "gs" {
		return nil, fmt.Errorf("gcsstore: URL scheme %q, want gs", u.Scheme)
	}
	if u.User != nil || u.Fragment != "" || u.Opaque != "" {
		return nil, fmt.Errorf("gcsstore: URL %q: user info, opaque parts and fragments are not allowed", u.Redacted())
	}
	if err := validateBucket(u.Host); err != nil {
		return nil, err
	}
	opts := Options{Prefix: strings.Trim(u.Path, "/")}
	clientOpts := []option.ClientOption{storage.WithJSONReads()}
	for name, vals := range u.Query() {
		if len(vals) != 1 {
			return nil, fmt.Errorf("gcsstore: URL parameter %q given %d times", name, len(vals))
		}
		v := vals[0]
		var err error
		switch name {
		case "endpoint":
			var ep string
			if ep, err = endpointURL(v); err == nil {
				clientOpts = append(clientOpts, option.WithEndpoint(ep), option.WithoutAuthentication())
			}
		case "chunk_size":
			var n int64
			if n, err = parseSize(v); err == nil {
				opts.ChunkSize = int(n)
			}
		case "parallel_threshold":
			opts.ParallelThreshold, err = parseSize(v)
		case "part_size":
			opts.PartSize, err = parseSize(v)
		case "concurrency":
			opts.Concurrency, err = strconv.Atoi(v)
			if err == nil && opts.Concurrency < 1 {
				err = fmt.Errorf("must be at least 1")
			}
		default:
			err = fmt.Errorf("unknown parameter (known: endpoint, chunk_size, parallel_threshold, part_size, concurrency)")
		}
		if err != nil {
			return nil, fmt.Errorf("gcsstore: URL parameter %s=%q: %w", name, v, err)
		}
	}
	client, err := storage.NewClient(ctx, clientOpts...)
	if err != nil {
		return nil, fmt.Errorf("gcsstore: create client: %w", err)
	}
	s, err := New(client, u.Host, &opts)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	s.ownsClient = true
	return s, nil
}

// endpointURL turns "http://host:port" into the JSON API base URL the SDK
// expects ("http://host:port/storage/v1/").
func endpointURL(v string) (string, error) {
	eu, err := url.Parse(v)
	if err != nil {
		return "", err
	}
	if (eu.Scheme != "http" && eu.Scheme != "https") || eu.Host == "" {
		return "", fmt.Errorf("want http://host:port or https://host:port")
	}
	p := strings.TrimSuffix(eu.Path, "/")
	if !strings.HasSuffix(p, "/storage/v1") {
		p += "/storage/v1"
	}
	eu.Path = p + "/"
	eu.RawQuery, eu.Fragment = "", ""
	return eu.String(), nil
}

// parseSize parses "123", "16M", "16MiB", "1G" (powers of 1024) and -1.
func parseSize(v string) (int64, error) {
	s := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSpace(v), "B"), "i")
	mult := int64(1)
	if s != "" {
		switch s[len(s)-1] {
		case 'k', 'K':
			mult = 1 << 10
		case 'm', 'M':
			mult = 1 << 20
		case 'g', 'G':
			mult = 1 << 30
		}
		if mult != 1 {
			s = s[:len(s)-1]
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("not a size (want e.g. 1048576, 16M or 16MiB)")
	}
	if n < -1 || (n == -1 && mult != 1) || n > (1<<62)/mult {
		return 0, fmt.Errorf("size out of range")
	}
	return n * mult, nil
}
