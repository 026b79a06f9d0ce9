package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
)

// trainer is a small but real training job: a linear regression model
// fitted with minibatch SGD with momentum on data generated from a fixed
// "true" model plus noise. Everything that influences the result is state
// that must be checkpointed: the parameters, the optimizer's velocity, the
// RNG that draws minibatches, and the position in the data stream.
type trainer struct {
	dim     int
	batch   int
	lr      float64
	mom     float64
	seed    uint64
	w       []float64 // parameters
	v       []float64 // momentum
	pcg     *rand.PCG // minibatch sampling
	rng     *rand.Rand
	pos     uint64 // samples consumed
	truth   []float64
	x       []float64 // scratch: one sample
	grad    []float64 // scratch
	lastMSE float64
}

func newTrainer(dim, batch int, seed uint64) *trainer {
	// A learning rate of 0.02·batch/dim keeps SGD with momentum stable for
	// unit-variance inputs of any dimension.
	t := &trainer{dim: dim, batch: batch, lr: 0.02 * float64(batch) / float64(dim), mom: 0.9, seed: seed,
		w: make([]float64, dim), v: make([]float64, dim),
		x: make([]float64, dim), grad: make([]float64, dim)}
	t.pcg = rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)
	t.rng = rand.New(t.pcg)
	truth := rand.New(rand.NewPCG(seed+1, 7))
	t.truth = make([]float64, dim)
	for i := range t.truth {
		t.truth[i] = truth.NormFloat64() / math.Sqrt(float64(dim))
	}
	return t
}

// sample fills t.x with data sample i (a pure function of the seed and i,
// so the data stream can resume anywhere) and returns its label.
func (t *trainer) sample(i uint64) float64 {
	r := rand.New(rand.NewPCG(t.seed^i, i*0x2545f4914f6cdd1d+1))
	y := 0.0
	for j := range t.x {
		t.x[j] = r.NormFloat64()
		y += t.x[j] * t.truth[j]
	}
	return y + 0.01*r.NormFloat64()
}

// step runs one minibatch update and returns the minibatch's mean squared
// error before the update.
func (t *trainer) step() float64 {
	clear(t.grad)
	mse := 0.0
	for range t.batch {
		// Draw which of the next samples to use from the sampling RNG, so
		// that its state matters for reproducibility.
		i := t.pos + uint64(t.rng.IntN(4))
		t.pos++
		y := t.sample(i)
		pred := 0.0
		for j, xj := range t.x {
			pred += xj * t.w[j]
		}
		e := pred - y
		mse += e * e
		for j, xj := range t.x {
			t.grad[j] += 2 * e * xj
		}
	}
	n := float64(t.batch)
	for j := range t.w {
		t.v[j] = t.mom*t.v[j] - t.lr*t.grad[j]/n
		t.w[j] += t.v[j]
	}
	t.lastMSE = mse / n
	return t.lastMSE
}

// Checkpoint parts. Parameters and optimizer state are large and written
// as raw little-endian float64s; the rest is tiny.
const (
	partParams    = "params.f64"
	partOptimizer = "optimizer.f64"
	partRNG       = "rng.bin"
	partData      = "data.bin"
)

func floats(b []float64) []byte {
	out := make([]byte, 8*len(b))
	for i, f := range b {
		binary.LittleEndian.PutUint64(out[8*i:], math.Float64bits(f))
	}
	return out
}

func unfloats(dst []float64, b []byte) error {
	if len(b) != 8*len(dst) {
		return fmt.Errorf("want %d bytes for %d float64s, got %d", 8*len(dst), len(dst), len(b))
	}
	for i := range dst {
		dst[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return nil
}

func (t *trainer) rngState() []byte {
	b, err := t.pcg.MarshalBinary()
	if err != nil {
		panic(err) // PCG's MarshalBinary cannot fail
	}
	return b
}

func (t *trainer) dataState() []byte {
	var buf bytes.Buffer
	_ = binary.Write(&buf, binary.LittleEndian, t.pos)
	_ = binary.Write(&buf, binary.LittleEndian, math.Float64bits(t.lastMSE))
	return buf.Bytes()
}

// load restores the trainer from checkpoint parts; a missing part is an
// error, so a checkpoint of the wrong shape is never half-applied.
func (t *trainer) load(parts map[string][]byte) error {
	for _, name := range []string{partParams, partOptimizer, partRNG, partData} {
		if _, ok := parts[name]; !ok {
			return fmt.Errorf("checkpoint lacks part %s", name)
		}
	}
	w, v := make([]float64, t.dim), make([]float64, t.dim)
	if err := unfloats(w, parts[partParams]); err != nil {
		return fmt.Errorf("%s: %w", partParams, err)
	}
	if err := unfloats(v, parts[partOptimizer]); err != nil {
		return fmt.Errorf("%s: %w", partOptimizer, err)
	}
	pcg := rand.NewPCG(0, 0)
	if err := pcg.UnmarshalBinary(parts[partRNG]); err != nil {
		return fmt.Errorf("%s: %w", partRNG, err)
	}
	d := parts[partData]
	if len(d) != 16 {
		return errors.New(partData + ": want 16 bytes")
	}
	t.w, t.v, t.pcg, t.rng = w, v, pcg, rand.New(pcg)
	t.pos = binary.LittleEndian.Uint64(d)
	t.lastMSE = math.Float64frombits(binary.LittleEndian.Uint64(d[8:]))
	return nil
}

// loss is the model's exact distance to the true parameters (plus the
// noise floor), comparable across runs bit for bit.
func (t *trainer) loss() float64 {
	s := 0.0
	for j := range t.w {
		d := t.w[j] - t.truth[j]
		s += d * d
	}
	return s
}
