package config

import (
	"fmt"
	"strconv"
	"strings"
)

// Community is a standard BGP community (RFC 1997): the high 16 bits an AS, the low 16
// a value, written "65001:100".
type Community uint32

// Well-known communities by the names routers print them with.
var wellKnownCommunities = map[string]Community{
	"no-export":    0xFFFFFF01,
	"no-advertise": 0xFFFFFF02,
	"no-peer":      0xFFFFFF04, // RFC 3765
	"blackhole":    0xFFFF029A, // RFC 7999
}

func (c Community) String() string {
	for name, v := range wellKnownCommunities {
		if v == c {
			return name
		}
	}
	return fmt.Sprintf("%d:%d", uint32(c)>>16, uint32(c)&0xFFFF)
}

// ParseCommunity reads "ASN:value" (each 0..65535) or a well-known name.
func ParseCommunity(s string) (Community, error) {
	if c, ok := wellKnownCommunities[s]; ok {
		return c, nil
	}
	parts, err := communityParts(s, 2, 16)
	if err != nil {
		return 0, fmt.Errorf("%s is not a community (ASN:value, each 0..65535, or one of no-export, no-advertise, no-peer, blackhole)", quote(s))
	}
	return Community(parts[0]<<16 | parts[1]), nil
}

// LargeCommunity is a BGP large community (RFC 8092), written "65001:1:2".
type LargeCommunity struct{ Global, Local1, Local2 uint32 }

func (c LargeCommunity) String() string { return fmt.Sprintf("%d:%d:%d", c.Global, c.Local1, c.Local2) }

// ParseLargeCommunity reads "global:local1:local2" (each 0..4294967295).
func ParseLargeCommunity(s string) (LargeCommunity, error) {
	parts, err := communityParts(s, 3, 32)
	if err != nil {
		return LargeCommunity{}, fmt.Errorf("%s is not a large community (global:local1:local2, each 0..4294967295)", quote(s))
	}
	return LargeCommunity{uint32(parts[0]), uint32(parts[1]), uint32(parts[2])}, nil
}

func communityParts(s string, n, bits int) ([]uint64, error) {
	fields := strings.Split(s, ":")
	if len(fields) != n {
		return nil, fmt.Errorf("want %d parts", n)
	}
	out := make([]uint64, n)
	for i, f := range fields {
		v, err := strconv.ParseUint(f, 10, bits)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}
