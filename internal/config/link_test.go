package config

import (
	"strings"
	"testing"
)

const linkFile = `link:
  name: dc1-dc2
  local: {address: 192.0.2.1, prefixes: [10.1.0.0/16]}
  remote: {address: 192.0.2.2, prefixes: [10.2.0.0/16, 10.3.0.0/16]}
  tunnels: 4
  private_key_file: dc1.key
  peer_public_key: ThxgqOncpcA21h5JzqGQLqMx880sOzNM5Hg8TQMpNkk=
`

func TestParseLink(t *testing.T) {
	l, err := ParseLink("l.yaml", []byte(linkFile))
	if err != nil {
		t.Fatal(err)
	}
	if l.Tunnels != 4 || l.Port != DefaultLinkPort || len(l.Remote.Prefixes) != 2 || l.Health.Interval != DefaultLinkProbeInterval ||
		l.PeerPublicKey[0] != 0x4e || l.InnerPrefix.String() != DefaultLinkInnerPrefix {
		t.Errorf("parsed: %+v", l)
	}
	if KindOf([]byte(linkFile)) != LinkFile {
		t.Errorf("KindOf: %s", KindOf([]byte(linkFile)))
	}
}

// The link's cross-field problems each name the field at fault, and a key is never
// quoted back (it may be a private key pasted in the wrong place).
func TestParseLinkProblems(t *testing.T) {
	for _, c := range []struct{ name, from, to, field, msg string }{
		{"overlap across sides", "10.2.0.0/16, 10.3", "10.1.128.0/17, 10.3", "link.remote.prefixes[0]", "overlaps 10.1.0.0/16"},
		{"overlap within a side", "10.3.0.0/16]", "10.2.3.0/24]", "link.remote.prefixes[1]", "overlaps 10.2.0.0/16"},
		{"outer address inside a prefix", "address: 192.0.2.2", "address: 10.2.0.9", "link.remote.prefixes[0]", "holds the outer address 10.2.0.9"},
		{"families", "address: 192.0.2.2", "address: 2001:db8::2", "link.remote.address", "not of the local address's family"},
		{"same address", "address: 192.0.2.2", "address: 192.0.2.1", "link.remote.address", "is the local address too"},
		{"short key", "ThxgqOncpcA21h5JzqGQLqMx880sOzNM5Hg8TQMpNkk=", "ThxgqOncpcA21h5JzqGQLqMx880sOzNM", "link.peer_public_key", "decodes to 24 bytes"},
		{"not base64", "ThxgqOncpcA21h5JzqGQLqMx880sOzNM5Hg8TQMpNkk=", "not-a-key!", "link.peer_public_key", "is not base64"},
		{"inner prefix too small", "tunnels: 4", "tunnels: 4\n  inner_prefix: 169.254.1.0/30", "link.inner_prefix", "4 tunnels need 8"},
		{"inner prefix IPv6", "tunnels: 4", "tunnels: 4\n  inner_prefix: fd00::/64", "link.inner_prefix", "is not IPv4"},
		{"device stem", "tunnels: 4", "tunnels: 4\n  devices: averyveryverylongname", "link.devices", "not a device stem"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseLink("l.yaml", []byte(strings.Replace(linkFile, c.from, c.to, 1)))
			if msg := problemAt(err, c.field); !strings.Contains(msg, c.msg) {
				t.Errorf("%s: got %v, want %q", c.field, err, c.msg)
			}
			if err != nil && strings.Contains(c.field, "key") && strings.Contains(err.Error(), c.to) {
				t.Errorf("the key is quoted: %v", err)
			}
		})
	}
}
