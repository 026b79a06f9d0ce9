// Package storetest helps test checkpoint.Store implementations and the
// code that uses them.
//
//   - [RunConformance] is the behaviour every Store must have, tested through
//     the public interface: a store package's test file is a few lines that
//     build a fresh store per subtest and call it.
//   - [RunBenchmarks] measures Put and Get throughput with b.SetBytes, and,
//     given the raw operations of the backing system ([RawOps]), reports the
//     store's throughput as a ratio of the raw one.
//   - [Faulty] wraps any Store and injects faults: failed calls, streams
//     that fail or hang after N bytes, corrupted bytes, slowness, disk full.
//
// A store package's whole conformance test:
//
//	func TestConformance(t *testing.T) {
//		storetest.RunConformance(t, func(t *testing.T) checkpoint.Store {
//			s, err := mystore.New(t.TempDir(), nil) // or: a fresh bucket prefix
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// The package is modelled on gocloud.dev's drivertest.
package storetest
