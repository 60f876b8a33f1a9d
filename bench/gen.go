// Package bench holds manifold's benchmarks: `manifold-bench …` and `make bench` run
// them; they report numbers and ratios against references measured in the same run,
// and never pass or fail on time.
package bench

//go:generate go tool bpf2go -cc clang -target bpfel -cflags "-O2 -g -Wall -Werror -I../bpf/include" reference ../bpf/reference.c
//go:generate go tool bpf2go -cc clang -target bpfel -cflags "-O2 -g -Wall -Werror -I../bpf/include" -type sink_count pktrate ../bpf/pktrate.c
