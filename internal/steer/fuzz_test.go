package steer

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseScenario: any scenario file (`manifold steer simulate`) gives a scenario a
// run can take (a positive step, at most maxSteps of them, elasticity within 0..1, an
// origin) or an error, never a panic.
func FuzzParseScenario(f *testing.F) {
	files, _ := filepath.Glob("../../bench/steer/*.yaml")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(goodScenario))
	f.Add([]byte("duration: &d 60s\nstep: *d\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := ParseScenario("x.yaml", data)
		if err != nil {
			return
		}
		if sc.Step <= 0 || sc.Duration <= 0 || sc.Duration/sc.Step > maxSteps ||
			sc.Elasticity < 0 || sc.Elasticity > 1 || len(sc.Origins) == 0 {
			t.Fatalf("bad scenario %+v", sc)
		}
	})
}
