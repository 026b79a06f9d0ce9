//go:build !amd64 || purego

package checkpoint

const haveCRCFold = false

func crcFold(uint32, []byte) uint32 { panic("checkpoint: crcFold without CPU support") }
