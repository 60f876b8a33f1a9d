package bench

import (
	"strings"
	"testing"
)

// Samples inside the program count for the source line whose code holds them (the
// last line starting at or before the address), in any of its functions; samples
// outside count for perf's symbol; the rows come most first with their shares.
func TestProfileLinesAttributesByJITLine(t *testing.T) {
	img := JITImage{
		Funcs: [][2]uint64{{0x1000, 0x1100}, {0x2000, 0x2040}},
		Lines: []JITLine{{0x1000, "lb.c:1 entry"}, {0x1040, "flow.h:9 compare"}, {0x2000, "nat.h:3 sub"}},
	}
	perf := strings.Join([]string{
		"1000 bpf_prog_x", "103f bpf_prog_x", // entry line, up to the next line's start
		"1040 bpf_prog_x", "10ff bpf_prog_x", "1080 bpf_prog_x", // the compare, to the function's end
		"2010 bpf_prog_x",                        // the subprogram's line
		"1100 veth_xdp_rcv", "ffff veth_xdp_rcv", // past the end: the kernel's
		"2040 xdp_do_redirect",
	}, "\n")
	rows, prog, err := ProfileLines(img, strings.NewReader(perf))
	if err != nil {
		t.Fatal(err)
	}
	want := []ProfileRow{
		{"prog: flow.h:9 compare", 3, 3.0 / 9}, {"prog: lb.c:1 entry", 2, 2.0 / 9}, {"veth_xdp_rcv", 2, 2.0 / 9},
		{"prog: nat.h:3 sub", 1, 1.0 / 9}, {"xdp_do_redirect", 1, 1.0 / 9},
	}
	if len(rows) != len(want) {
		t.Fatalf("rows %+v, want %+v", rows, want)
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Errorf("row %d: %+v, want %+v", i, rows[i], want[i])
		}
	}
	if prog != 6.0/9 {
		t.Errorf("the program's share %.3f, want 6/9", prog)
	}
	if _, _, err := ProfileLines(img, strings.NewReader("not-hex sym")); err == nil {
		t.Error("a line without an address was taken")
	}
}
