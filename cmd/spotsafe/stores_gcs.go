package main

// The gs:// scheme for ls, verify, restore and prune. This is the only
// import of gcsstore outside its own package: it links the GCS client
// (about 50 MB of grpc and otel) into this command and nowhere else.
import _ "github.com/spotsafe/spotsafe/checkpoint/gcsstore"
