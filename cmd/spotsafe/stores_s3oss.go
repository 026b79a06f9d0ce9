package main

// The spotsafe command opens s3:// and oss:// checkpoint URLs (ls, verify,
// restore, prune): importing the stores registers their schemes.
import (
	_ "github.com/spotsafe/spotsafe/checkpoint/ossstore"
	_ "github.com/spotsafe/spotsafe/checkpoint/s3store"
)
