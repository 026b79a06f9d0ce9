package checkpoint

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"
)

// ClaimName is the object an upload creates, conditionally, in its step's
// directory before it stores any part: the one writer holding a step's
// claim is the only one writing its parts, so two writers racing on a step
// can never mix their parts. The claim is deleted after the commit.
const ClaimName = "CLAIM.json"

// claimTTL is how long the claim of an upload without a deadline counts as
// live, unless its process is known to be dead.
const claimTTL = 15 * time.Minute

// claimRecord is the content of CLAIM.json.
type claimRecord struct {
	Writer
	Created time.Time `json:"created"`
	// Expires is the upload's deadline, or Created + claimTTL.
	Expires time.Time `json:"expires"`
	Nonce   string    `json:"nonce"`
}

// claim takes the step's claim for this upload. A claim held by another
// live writer, or a manifest already there, is [ErrStepExists]. A stale
// claim (expired, or its process gone on this host, or left by this very
// process) is taken over.
func (m *Manager) claim(ctx context.Context, step int64, expires time.Time) error {
	key := m.key(step, ClaimName)
	var nonce [8]byte
	rand.Read(nonce[:])
	now := time.Now().UTC()
	data, err := json.Marshal(claimRecord{Writer: m.writer, Created: now, Expires: expires.UTC(), Nonce: hex.EncodeToString(nonce[:])})
	if err != nil {
		return err
	}
	tookOver := false
	for attempt := 0; ; attempt++ {
		err := m.create(ctx, key, data)
		if !errors.Is(err, fs.ErrExist) {
			return err
		}
		raw, err := m.readSmall(ctx, key)
		if errors.Is(err, fs.ErrNotExist) && attempt < 3 {
			continue // released in between
		}
		if err != nil {
			return fmt.Errorf("read claim: %w", err)
		}
		var other claimRecord
		perr := json.Unmarshal(raw, &other)
		if !tookOver && (perr != nil || m.staleClaim(other, time.Now())) {
			tookOver = true
			m.log.Warn("checkpoint taking over a stale claim", "ckpt.step", step, "holder", string(raw))
			if err := m.store.Delete(ctx, key); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("remove stale claim: %w", err)
			}
			continue
		}
		if perr != nil {
			return fmt.Errorf("%w: step %d is claimed by another writer", ErrStepExists, step)
		}
		return fmt.Errorf("%w: step %d is being saved by run %s (host %s, pid %d, since %s)",
			ErrStepExists, step, other.RunID, other.Host, other.PID, other.Created.Format(time.RFC3339))
	}
}

// staleClaim reports whether a claim's holder can no longer be writing.
func (m *Manager) staleClaim(c claimRecord, now time.Time) bool {
	switch {
	case !c.Expires.IsZero() && now.After(c.Expires):
		return true
	case c.Host != m.writer.Host || c.PID <= 0:
		return false
	case c.PID == m.writer.PID:
		// This process: an earlier failed attempt of this Manager (one
		// upload at a time), or another Manager of the same run.
		return c.RunID == m.writer.RunID
	default:
		return !processAlive(c.PID)
	}
}

// release deletes the claim, best effort: a claim left behind only delays
// another writer of the same step until it goes stale.
func (m *Manager) release(ctx context.Context, step int64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	key := m.key(step, ClaimName)
	if err := m.store.Delete(ctx, key); err != nil && !errors.Is(err, fs.ErrNotExist) {
		m.log.Warn("checkpoint could not release its claim", "ckpt.step", step, "err", err)
	}
}

// create stores data at key only if nothing is there (conditionally when
// the store can), with retries. An fs.ErrExist caused by this very call's
// earlier attempt (whose answer got lost) counts as success.
func (m *Manager) create(ctx context.Context, key string, data []byte) error {
	cp, conditional := m.store.(ConditionalPutter)
	err := m.retry(ctx, "create "+key, func() error {
		if conditional {
			return cp.PutIfAbsent(ctx, key, bytes.NewReader(data), int64(len(data)))
		}
		// Without a conditional put, check then put: two writers racing
		// can then both succeed.
		rc, err := m.store.Get(ctx, key)
		if err == nil {
			rc.Close()
			return Exists(key, nil)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return m.store.Put(ctx, key, bytes.NewReader(data), int64(len(data)))
	})
	if errors.Is(err, fs.ErrExist) {
		if got, rerr := m.readSmall(ctx, key); rerr == nil && bytes.Equal(got, data) {
			return nil
		}
	}
	return err
}
