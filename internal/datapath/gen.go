// Package datapath loads manifold's BPF programs and is the typed writer of their maps.
//
// The objects are compiled by bpf2go from bpf/ and committed; `make generate` rebuilds
// them and `make check-generated` fails when the committed ones drift from the source.
package datapath

//go:generate go tool bpf2go -cc clang -target bpfel -cflags "-O2 -g -Wall -Werror -I../../bpf/include" -type lb_vip_key -type lb_vip -type lb4_vip_slot -type lb6_vip_slot -type lb_backend -type lb_backend_state -type lb_flow_key -type lb_flow -type lb_flow_entry -type lb_flow_bucket -type lb_counters -type lb_nexthop -type lb_backend_cpu_state -type lb_drop_reason -type lb_event -type lb_shared -type lb_family -type lb_encap -type lb_vip_flags -type lb_nat_key -type lb_nat -type lb_nat_state -type lb_nat_flow lb ../../bpf/lb.c
//go:generate go tool bpf2go -cc clang -target bpfel -cflags "-O2 -g -Wall -Werror -I../../bpf/include" -type lb_decap_counter decap ../../bpf/decap.c
