package steer

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// BenchmarkRound is one round of the controller over every service of a world:
// SolveTarget and the control law for each, from the shares a fleet starts with (each
// site on its closest origin, as a round without demand decides them). Besides the
// wall time it reports the process's CPU time per round (cpu-ms/op): on a shared
// machine the wall time counts the waits for a core.
func BenchmarkRound(b *testing.B) {
	for _, size := range []struct{ sites, origins, services int }{{100, 50, 1}, {1000, 100, 1}, {1000, 100, 10}} {
		b.Run(fmt.Sprintf("%dx%dx%d", size.sites, size.origins, size.services), func(b *testing.B) {
			obs := World{Sites: size.sites, Origins: size.origins, Seed: 1}.Observations(size.services)
			current := make([]Shares, len(obs))
			for i, o := range obs {
				current[i] = Manifold{}.Decide(time.Time{}, idle(o), nil).Shares()
			}
			b.ResetTimer()
			before := cpuTime()
			for range b.N {
				for i, o := range obs {
					Manifold{}.Decide(time.Time{}, o, current[i])
				}
			}
			b.ReportMetric(float64(cpuTime()-before)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
		})
	}
}

// idle is obs without demand.
func idle(obs Observation) Observation {
	out := obs
	out.Sites = nil
	for _, s := range obs.Sites {
		s.Demand = 0
		out.Sites = append(out.Sites, s)
	}
	return out
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
