package main

// manifold steer: the global steering controller. --config runs it live on the fleet
// store (steerlive.go); simulate runs it, and the seed's baseline, over a scenario on a
// simulated clock.

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/steer"
)

const steerUsage = `usage: manifold steer --config FILE
  run the steering controller on the fleet store (etcd): several may run, one leads
  (an etcd election) and writes the shares the nodes apply; FILE has the fleet section
  of the nodes' files and steer: {name, interval, lease}
usage: manifold steer simulate --scenario FILE [--algorithm manifold|seed] [--json OUT] [--plot OUT.png]
  run the steering controller over a scenario (docs/steering.md) on a simulated
  clock and print the summary; without --algorithm, manifold's and the seed's baseline
  side by side. --json writes the time series and summaries; --plot draws load against
  capacity over time (bench/steer_plot.py, run from the repository's root)`

// steerPlotScript draws --plot; it is the repository's, found from the working directory.
const steerPlotScript = "bench/steer_plot.py"

// steerReport is what --json writes.
type steerReport struct {
	Scenario string      `json:"scenario"`
	File     string      `json:"file"`
	Runs     []steer.Run `json:"runs"`
}

func steerCmd(args []string, w io.Writer) error {
	if len(args) > 0 && args[0] != "simulate" {
		return steerLiveCmd(args)
	}
	if len(args) == 0 {
		return errors.New(steerUsage)
	}
	fs := flag.NewFlagSet("steer simulate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	scenario := fs.String("scenario", "", "the scenario file (YAML)")
	algorithm := fs.String("algorithm", "", "manifold or seed; both when not given")
	jsonOut := fs.String("json", "", "write the series and summaries to this file")
	plotOut := fs.String("plot", "", "draw load against capacity into this PNG")
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("%v\n%s", err, steerUsage)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q\n%s", fs.Arg(0), steerUsage)
	}
	if *scenario == "" {
		return fmt.Errorf("--scenario FILE is required\n%s", steerUsage)
	}
	var controllers []func() steer.Controller
	switch *algorithm {
	case "":
		controllers = append(controllers, manifoldController, seedController)
	case "manifold":
		controllers = append(controllers, manifoldController)
	case "seed":
		controllers = append(controllers, seedController)
	default:
		return fmt.Errorf("--algorithm %q: want manifold or seed", *algorithm)
	}
	if *plotOut != "" {
		if _, err := os.Stat(steerPlotScript); err != nil {
			return fmt.Errorf("--plot needs %s: run from the repository's root (%w)", steerPlotScript, err)
		}
	}
	sc, err := steer.LoadScenario(*scenario)
	if err != nil {
		return err
	}
	report := steerReport{Scenario: sc.Name, File: *scenario}
	for _, c := range controllers {
		report.Runs = append(report.Runs, steer.Simulate(sc, c()))
	}
	printSimulation(w, sc, report.Runs)

	path := *jsonOut
	if path == "" && *plotOut != "" {
		dir, err := os.MkdirTemp("", "manifold-steer")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		path = filepath.Join(dir, "runs.json")
	}
	if path != "" {
		data, err := json.Marshal(report)
		if err != nil {
			return err
		}
		if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	if *plotOut != "" {
		out, err := hostprog.Command(hostprog.Python3, steerPlotScript, path, *plotOut).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %w\n%s", steerPlotScript, err, out)
		}
		fmt.Fprintf(w, "plot: %s\n", *plotOut)
	}
	return nil
}

func manifoldController() steer.Controller { return steer.Manifold{} }
func seedController() steer.Controller     { return steer.NewSeed() }

// printSimulation prints the summaries as a table, then each run's last decision.
func printSimulation(w io.Writer, sc *steer.Scenario, runs []steer.Run) {
	fmt.Fprintf(w, "scenario %s: %s in steps of %s, elasticity %g; sites: %d, origins: %d, events: %d\n\n",
		sc.Name, sc.Duration, sc.Step, sc.Elasticity, len(sc.Sites), len(sc.Origins), len(sc.Events))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "algorithm\tconverged_s\texcess_flows\tmax_overload_pct\toscillations\tmean_rtt_ms\tserved_pct\t")
	for _, r := range runs {
		s := r.Summary
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.1f\t%d\t%.1f\t%.1f\t\n",
			r.Algorithm, s.ConvergedS, s.ExcessFlows, s.MaxOverloadPct, s.Oscillations, s.MeanRTTMs, s.ServedPct)
	}
	tw.Flush()
	for _, r := range runs {
		fmt.Fprintf(w, "\n%s, last round:\n", r.Algorithm)
		if r.Final.Note != "" {
			fmt.Fprintf(w, "  %s\n", r.Final.Note)
		}
		for _, site := range r.Final.Sites {
			for _, sh := range site.Shares {
				fmt.Fprintf(w, "  %s → %s  %5.1f %%  %s\n", site.Site, sh.Origin, 100*sh.Share, sh.Reason)
			}
		}
		for _, o := range r.Final.Origins {
			fmt.Fprintf(w, "  %s: %s\n", o.Origin, o.Reason)
		}
	}
}
