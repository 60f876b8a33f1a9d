package lab

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
)

// DashboardFile is the Grafana dashboard manifold ships, from test/lab.
const DashboardFile = "../../deploy/grafana/manifold.json"

// DashboardMetrics returns the metric names the dashboard's queries read, sorted.
func DashboardMetrics(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	name := regexp.MustCompile(`\bmanifold_[a-z0-9_]+`)
	var out []string
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			return nil, fmt.Errorf("%s: panel %q has no query", path, p.Title)
		}
		for _, tg := range p.Targets {
			found := name.FindAllString(tg.Expr, -1)
			if len(found) == 0 {
				return nil, fmt.Errorf("%s: panel %q queries no manifold metric: %s", path, p.Title, tg.Expr)
			}
			out = append(out, found...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
