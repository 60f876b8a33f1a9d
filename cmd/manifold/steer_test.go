package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/testenv"
)

func TestSteerSimulateWritesBothAlgorithms(t *testing.T) {
	out := filepath.Join(t.TempDir(), "seed.json")
	var w bytes.Buffer
	if err := steerCmd([]string{"simulate", "--scenario", "../../bench/steer/seed.yaml", "--json", out}, &w); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"converged_s", "manifold", "seed", "us at capacity 200/s"} {
		if !strings.Contains(w.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, w.String())
		}
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var report struct {
		Scenario string
		Runs     []struct {
			Algorithm string
			Summary   map[string]float64
			Series    struct{ T []float64 }
		}
	}
	if err := json.Unmarshal(data, &report); err != nil {
		t.Fatal(err)
	}
	if report.Scenario != "seed" || len(report.Runs) != 2 || report.Runs[0].Algorithm != "manifold" || report.Runs[1].Algorithm != "seed" {
		t.Fatalf("report: scenario %q, %d runs", report.Scenario, len(report.Runs))
	}
	for _, r := range report.Runs {
		if len(r.Series.T) != 600 {
			t.Errorf("%s: %d samples, want 600", r.Algorithm, len(r.Series.T))
		}
		for _, k := range []string{"converged_s", "excess_flows", "max_overload_pct", "oscillations", "mean_rtt_ms", "served_pct"} {
			if _, ok := r.Summary[k]; !ok {
				t.Errorf("%s: summary lacks %s", r.Algorithm, k)
			}
		}
	}
}

func TestSteerSimulateRefusesBadInput(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("duration: 10s\nstep: 1s\norigins: []\nsites: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out.json")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "usage: manifold steer simulate"},
		{[]string{"simulate"}, "--scenario FILE is required"},
		{[]string{"simulate", "--scenario", "../../bench/steer/seed.yaml", "--algorithm", "naive"}, `--algorithm "naive"`},
		{[]string{"simulate", "--scenario", bad, "--json", out}, "origins: at least one origin is required"},
	} {
		err := steerCmd(tc.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a refused scenario still wrote its JSON")
	}
}

func TestSteerSimulatePlots(t *testing.T) {
	if err := hostprog.Command(hostprog.Python3, "-c", "import matplotlib").Run(); err != nil {
		testenv.Missingf(t, "python3 with matplotlib is missing (make deps installs it): %v", err)
	}
	t.Chdir(filepath.Join("..", ".."))
	png := filepath.Join(t.TempDir(), "seed.png")
	if err := steerCmd([]string{"simulate", "--scenario", "bench/steer/seed.yaml", "--plot", png}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(png)
	if err != nil || !bytes.HasPrefix(data, []byte("\x89PNG")) {
		t.Fatalf("no PNG at %s: %v", png, err)
	}
}
