module github.com/manifoldlb/manifold

go 1.26.8

require (
	github.com/cilium/ebpf v0.22.0
	github.com/gopacket/gopacket v1.7.7
	github.com/vishvananda/netlink v1.3.1
	github.com/vishvananda/netns v0.0.5
	golang.org/x/sys v0.45.0
	gopkg.in/yaml.v3 v3.0.1
)

tool github.com/cilium/ebpf/cmd/bpf2go
