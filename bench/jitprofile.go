package bench

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
)

// Where a loaded BPF program spends the time of a live path, by source line: a
// sampling profile of a CPU (perf record -e cpu-clock; this VM has no hardware
// counters), whose samples inside the program are mapped to the source line whose JIT
// code holds them, through the program's JIT line table (bpf_prog_info's jited line
// info; this host's perf and bpftool cannot disassemble BPF). Samples elsewhere count
// for the kernel symbol perf named. docs/performance.md, "Where the time goes".

// JITLine is one record of a program's JIT line table: where the machine code of a
// source line starts.
type JITLine struct {
	Addr   uint64
	Source string // file:line and the line's text
}

// JITImage is a loaded program's machine code: its functions' ranges and its lines.
type JITImage struct {
	Funcs [][2]uint64 // [start, end) of each function (the program and its subprograms)
	Lines []JITLine   // sorted by address
}

// LoadedJITImage reads the JIT image of the loaded program called name (as bpftool
// lists it: at most 15 characters).
func LoadedJITImage(name string) (JITImage, error) {
	for id := ebpf.ProgramID(0); ; {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return JITImage{}, fmt.Errorf("no loaded program is called %q", name)
		}
		if err != nil {
			return JITImage{}, fmt.Errorf("list programs (needs root): %w", err)
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // gone since it was listed
		}
		info, err := p.Info()
		p.Close()
		if err != nil || info.Name != name {
			continue
		}
		return jitImageOf(info)
	}
}

func jitImageOf(info *ebpf.ProgramInfo) (JITImage, error) {
	starts, ok1 := info.JitedKsymAddrs()
	lens, ok2 := info.JitedFuncLens()
	addrs, ok3 := info.JitedLineInfos()
	lines, err := info.LineInfos()
	if !ok1 || !ok2 || !ok3 || err != nil || len(starts) != len(lens) {
		return JITImage{}, fmt.Errorf("program %s: no JIT line table (needs root, and a program loaded with BTF): %v", info.Name, err)
	}
	var img JITImage
	for i, s := range starts {
		img.Funcs = append(img.Funcs, [2]uint64{uint64(s), uint64(s) + uint64(lens[i])})
	}
	for i, l := range lines {
		if i >= len(addrs) {
			break
		}
		img.Lines = append(img.Lines, JITLine{Addr: addrs[i],
			Source: fmt.Sprintf("%s:%d %s", l.Line.FileName(), l.Line.LineNumber(), strings.TrimSpace(l.Line.Line()))})
	}
	slices.SortStableFunc(img.Lines, func(a, b JITLine) int { return cmpUint64(a.Addr, b.Addr) })
	return img, nil
}

func cmpUint64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// where names the place of instruction address ip: the program's source line holding
// it, or "" when ip is outside the program.
func (img JITImage) where(ip uint64) string {
	inside := slices.ContainsFunc(img.Funcs, func(f [2]uint64) bool { return ip >= f[0] && ip < f[1] })
	if !inside {
		return ""
	}
	i, found := slices.BinarySearchFunc(img.Lines, ip, func(l JITLine, ip uint64) int { return cmpUint64(l.Addr, ip) })
	if !found {
		i-- // the line whose code starts before ip
	}
	if i < 0 {
		return "(program entry)"
	}
	return img.Lines[i].Source
}

// ProfileRow is a place and its share of the samples.
type ProfileRow struct {
	Place   string // "prog: <source line>" or a kernel symbol
	Samples int
	Share   float64 // of all samples
}

// ProfileLines reads `perf script -F ip,sym` output (an address in hex, then perf's
// symbol) and returns each place's samples, most first, and the program's share of
// all samples.
func ProfileLines(img JITImage, perfScript io.Reader) ([]ProfileRow, float64, error) {
	counts := map[string]int{}
	total, inProg := 0, 0
	sc := bufio.NewScanner(perfScript)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		ip, err := strconv.ParseUint(fields[0], 16, 64)
		if err != nil {
			return nil, 0, fmt.Errorf("perf script line %q: want an address in hex first (-F ip,sym)", sc.Text())
		}
		total++
		if src := img.where(ip); src != "" {
			inProg++
			counts["prog: "+src]++
			continue
		}
		sym := "[unknown]"
		if len(fields) > 1 {
			sym = fields[1]
		}
		counts[sym]++
	}
	if err := sc.Err(); err != nil {
		return nil, 0, err
	}
	if total == 0 {
		return nil, 0, errors.New("no samples")
	}
	rows := make([]ProfileRow, 0, len(counts))
	for place, n := range counts {
		rows = append(rows, ProfileRow{Place: place, Samples: n, Share: float64(n) / float64(total)})
	}
	slices.SortFunc(rows, func(a, b ProfileRow) int {
		if a.Samples != b.Samples {
			return b.Samples - a.Samples
		}
		return strings.Compare(a.Place, b.Place)
	})
	return rows, float64(inProg) / float64(total), nil
}
