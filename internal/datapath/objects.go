package datapath

import (
	"crypto/sha256"
	"encoding/hex"
)

// ObjectHash is one compiled BPF object the binary carries.
type ObjectHash struct {
	Name   string // the object file bpf2go embedded
	SHA256 string
}

// ObjectHashes names the BPF objects compiled into this binary and their SHA-256, so
// that `manifold version` tells two builds of the same commit with different clangs
// apart (the objects are committed; check-generated holds them to the sources).
func ObjectHashes() []ObjectHash {
	sum := func(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }
	return []ObjectHash{
		{"lb_bpfel.o", sum(_LbBytes)},
		{"decap_bpfel.o", sum(_DecapBytes)},
	}
}
