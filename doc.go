// Package spotsafe lets Go training and inference programs survive spot and
// preemptible instances.
//
// Spot capacity costs a fraction of on-demand, but the cloud takes it back
// with a short notice: AWS gives 2 minutes, GCP and Azure 30 seconds,
// Alibaba and Tencent a few minutes, Kubernetes and Slurm a SIGTERM and a
// grace period. spotsafe notices the interruption the moment the provider
// announces it, saves a checkpoint that fits in the time left, and exits in a
// way schedulers understand; on the next start it restores the newest
// checkpoint that verifies.
//
// This root package holds only documentation. The parts:
//
//   - [github.com/spotsafe/spotsafe/spot]: the runner most programs use. spot.Run
//     wraps a worker's entrypoint: restore on start, periodic checkpoints,
//     an emergency checkpoint on a notice, a conventional exit code.
//   - [github.com/spotsafe/spotsafe/notice]: one event model (Notice, Kind,
//     Deadline) for every way an instance is taken away, the Watcher that
//     polls sources, and the OS signal source.
//   - providers/awsspot, gcpspot, azurespot, alibabaspot, tencentspot: each
//     cloud's interruption metadata protocol; providers.Detect finds the cloud.
//   - [github.com/spotsafe/spotsafe/checkpoint]: asynchronous save, atomic
//     commit and verified restore over a pluggable Store, with stores for
//     local disk (filestore), memory (memstore), S3 (s3store), GCS (gcsstore)
//     and Alibaba OSS (ossstore).
//   - notice/noticetest and checkpoint/storetest: fake metadata servers and
//     conformance suites for testing programs and new drivers.
//
// The command cmd/spotsafe checks from inside a container that notices get
// through (spotsafe watch), simulates an interruption (spotsafe fake), and
// inspects checkpoints (spotsafe ls, verify, restore, prune).
package spotsafe
