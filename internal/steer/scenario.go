package steer

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/manifoldlb/manifold/internal/decode"
)

// Scenario is a simulated fleet: origins, sites with their offered demand over time,
// and events that change the origins.
type Scenario struct {
	Name     string
	Duration time.Duration
	// Step is the simulated interval between two observations, and so between two
	// rounds of the controller.
	Step time.Duration
	// Elasticity is the fraction by which a site's demand falls per 100 ms of mean RTT
	// above the RTT to its closest origin.
	Elasticity float64
	Origins    []ScenarioOrigin
	Sites      []ScenarioSite
	Events     []Event
}

// ScenarioOrigin is an origin as the scenario starts.
type ScenarioOrigin struct {
	Name     string
	Capacity float64
	Healthy  bool
}

// ScenarioSite is a site: its RTT to every origin, and its offered new flows per second
// over time.
type ScenarioSite struct {
	Name   string
	RTT    map[string]time.Duration
	Demand []DemandStep
}

// DemandStep is the offered rate from At on.
type DemandStep struct {
	At   time.Duration
	Rate float64
}

// Event changes an origin at At: its capacity, its health, or both.
type Event struct {
	At       time.Duration
	Origin   string
	Capacity *float64
	Healthy  *bool
}

// The file's shape: scalars stay yaml.Nodes so that every error names its field and line.
type scenarioFile struct {
	Duration   yaml.Node `yaml:"duration"`
	Step       yaml.Node `yaml:"step"`
	Elasticity yaml.Node `yaml:"elasticity"`
	Origins    []struct {
		Name     yaml.Node `yaml:"name"`
		Capacity yaml.Node `yaml:"capacity"`
		Healthy  yaml.Node `yaml:"healthy"`
	} `yaml:"origins"`
	Sites []struct {
		Name   yaml.Node            `yaml:"name"`
		RTT    map[string]yaml.Node `yaml:"rtt"`
		Demand []struct {
			At   yaml.Node `yaml:"at"`
			Rate yaml.Node `yaml:"rate"`
		} `yaml:"demand"`
	} `yaml:"sites"`
	World struct {
		Sites       yaml.Node `yaml:"sites"`
		Origins     yaml.Node `yaml:"origins"`
		Seed        yaml.Node `yaml:"seed"`
		Utilisation yaml.Node `yaml:"utilisation"`
	} `yaml:"world"`
	Events []struct {
		At       yaml.Node `yaml:"at"`
		Origin   yaml.Node `yaml:"origin"`
		Capacity yaml.Node `yaml:"capacity"`
		Healthy  yaml.Node `yaml:"healthy"`
	} `yaml:"events"`
}

// maxSteps bounds a run's length, so that a typo (step: 1ns) is refused rather than run.
const maxSteps = 1_000_000

// maxWorldSites, maxWorldOrigins and maxWorldPairs bound a generated fleet: its RTTs
// are map entries, about 100 bytes each, and a run's series holds every share.
const (
	maxWorldSites   = 10_000
	maxWorldOrigins = 1_000
	maxWorldPairs   = 1_000_000
)

// LoadScenario reads and validates a scenario file.
func LoadScenario(path string) (*Scenario, error) {
	data, err := decode.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseScenario(path, data)
}

// ParseScenario validates a scenario; every problem is reported, as FILE:LINE: field:
// message. The scenario's name is the file's, without directory and extension.
func ParseScenario(path string, data []byte) (*Scenario, error) {
	// the bounds first (size, depth, aliases): the typed decoder below keeps yaml.Nodes
	// with their aliases, as the scenario's fields
	if _, err := decode.YAML(data); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var f scenarioFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	p := &scenarioParser{file: path}
	sc := &Scenario{Name: strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))}
	sc.Duration = p.duration(&f.Duration, "duration", true)
	sc.Step = p.duration(&f.Step, "step", true)
	if sc.Duration <= 0 {
		p.fail(&f.Duration, "duration", "must be above 0")
	}
	if sc.Step <= 0 {
		p.fail(&f.Step, "step", "must be above 0")
	} else if sc.Duration/sc.Step > maxSteps {
		p.fail(&f.Step, "step", "%s over %s is more than %d steps", sc.Step, sc.Duration, maxSteps)
	}
	if sc.Elasticity = p.number(&f.Elasticity, "elasticity", false); sc.Elasticity < 0 || sc.Elasticity > 1 {
		p.fail(&f.Elasticity, "elasticity", "%g is not within 0 to 1", sc.Elasticity)
	}

	if wf := &f.World; wf.Sites.Kind != 0 || wf.Origins.Kind != 0 || wf.Seed.Kind != 0 || wf.Utilisation.Kind != 0 {
		// a generated fleet (World) stands for origins and sites
		w := World{Sites: p.count(&wf.Sites, "world.sites", maxWorldSites), Origins: p.count(&wf.Origins, "world.origins", maxWorldOrigins),
			Utilisation: p.number(&wf.Utilisation, "world.utilisation", false)}
		if seed := p.number(&wf.Seed, "world.seed", false); seed < 0 || seed != math.Trunc(seed) {
			p.fail(&wf.Seed, "world.seed", "%g is not a whole number of at least 0", seed)
		} else {
			w.Seed = uint64(seed)
		}
		if w.Utilisation < 0 || w.Utilisation > 10 {
			p.fail(&wf.Utilisation, "world.utilisation", "%g is not within 0 to 10", w.Utilisation)
		}
		if len(f.Origins) > 0 || len(f.Sites) > 0 {
			p.fail(&wf.Sites, "world", "stands for origins and sites: give one or the other")
		}
		if w.Sites*w.Origins > maxWorldPairs {
			p.fail(&wf.Sites, "world", "%d sites × %d origins is more than %d RTTs", w.Sites, w.Origins, maxWorldPairs)
		} else if w.Sites > 0 && w.Origins > 0 {
			gen := w.Scenario(sc.Name, sc.Duration, sc.Step, sc.Elasticity)
			sc.Origins, sc.Sites = gen.Origins, gen.Sites
		}
	}
	origins := map[string]bool{}
	for _, o := range sc.Origins {
		origins[o.Name] = true
	}
	if len(f.Origins) == 0 && len(sc.Origins) == 0 {
		p.errs = append(p.errs, fmt.Errorf("%s: origins: at least one origin is required", path))
	}
	for i, o := range f.Origins {
		field := fmt.Sprintf("origins[%d]", i)
		name := p.name(&o.Name, field+".name", origins)
		c := p.number(&o.Capacity, field+".capacity", true)
		if c < 0 {
			p.fail(&o.Capacity, field+".capacity", "%g is below 0", c)
		}
		healthy := true
		if o.Healthy.Kind != 0 {
			healthy = p.boolean(&o.Healthy, field+".healthy")
		}
		sc.Origins = append(sc.Origins, ScenarioOrigin{Name: name, Capacity: c, Healthy: healthy})
	}

	if len(f.Sites) == 0 && len(sc.Sites) == 0 {
		p.errs = append(p.errs, fmt.Errorf("%s: sites: at least one site is required", path))
	}
	sites := map[string]bool{}
	for i, s := range f.Sites {
		field := fmt.Sprintf("sites[%d]", i)
		site := ScenarioSite{Name: p.name(&s.Name, field+".name", sites), RTT: map[string]time.Duration{}}
		for _, o := range sc.Origins {
			if _, ok := s.RTT[o.Name]; !ok && o.Name != "" {
				p.fail(&s.Name, field+".rtt", "no RTT to origin %q", o.Name)
			}
		}
		for _, o := range slices.Sorted(maps.Keys(s.RTT)) {
			n := s.RTT[o]
			if !origins[o] {
				p.fail(&n, field+".rtt."+o, "no origin is named %q", o)
				continue
			}
			if site.RTT[o] = p.duration(&n, field+".rtt."+o, true); site.RTT[o] < 0 {
				p.fail(&n, field+".rtt."+o, "must not be negative")
			}
		}
		if len(s.Demand) == 0 {
			p.fail(&s.Name, field+".demand", "at least one {at, rate} is required")
		}
		for j, d := range s.Demand {
			df := fmt.Sprintf("%s.demand[%d]", field, j)
			step := DemandStep{At: p.duration(&d.At, df+".at", true), Rate: p.number(&d.Rate, df+".rate", true)}
			if step.Rate < 0 {
				p.fail(&d.Rate, df+".rate", "%g is below 0", step.Rate)
			}
			p.within(&d.At, df+".at", step.At, sc.Duration)
			if j > 0 && step.At <= site.Demand[j-1].At {
				p.fail(&d.At, df+".at", "%s is not after the previous step's %s", step.At, site.Demand[j-1].At)
			}
			site.Demand = append(site.Demand, step)
		}
		sc.Sites = append(sc.Sites, site)
	}

	for i, e := range f.Events {
		field := fmt.Sprintf("events[%d]", i)
		ev := Event{At: p.duration(&e.At, field+".at", true)}
		p.within(&e.At, field+".at", ev.At, sc.Duration)
		if i > 0 && ev.At < sc.Events[i-1].At {
			p.fail(&e.At, field+".at", "%s is before the previous event's %s", ev.At, sc.Events[i-1].At)
		}
		if e.Origin.Kind == 0 {
			p.fail(&e.At, field+".origin", "is required")
		} else if ev.Origin = e.Origin.Value; !origins[ev.Origin] {
			p.fail(&e.Origin, field+".origin", "no origin is named %q", ev.Origin)
		}
		if e.Capacity.Kind != 0 {
			c := p.number(&e.Capacity, field+".capacity", true)
			if c < 0 {
				p.fail(&e.Capacity, field+".capacity", "%g is below 0", c)
			}
			ev.Capacity = &c
		}
		if e.Healthy.Kind != 0 {
			h := p.boolean(&e.Healthy, field+".healthy")
			ev.Healthy = &h
		}
		if ev.Capacity == nil && ev.Healthy == nil {
			p.fail(&e.At, field, "changes nothing: give capacity, healthy or both")
		}
		sc.Events = append(sc.Events, ev)
	}
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return sc, nil
}

type scenarioParser struct {
	file string
	errs []error
}

func (p *scenarioParser) fail(n *yaml.Node, field, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s:%d: %s: %s", p.file, n.Line, field, fmt.Sprintf(format, args...)))
}

func (p *scenarioParser) missing(n *yaml.Node, field string) bool {
	if n.Kind != 0 {
		return false
	}
	p.errs = append(p.errs, fmt.Errorf("%s: %s: is required", p.file, field))
	return true
}

func (p *scenarioParser) scalar(n *yaml.Node, field string) bool {
	if n.Kind != yaml.ScalarNode {
		p.fail(n, field, "must be a single value")
		return false
	}
	return true
}

func (p *scenarioParser) duration(n *yaml.Node, field string, required bool) time.Duration {
	if (!required && n.Kind == 0) || (required && p.missing(n, field)) || !p.scalar(n, field) {
		return 0
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		p.fail(n, field, "%q is not a duration (like 10ms or 600s)", n.Value)
	}
	return d
}

func (p *scenarioParser) number(n *yaml.Node, field string, required bool) float64 {
	if (!required && n.Kind == 0) || (required && p.missing(n, field)) || !p.scalar(n, field) {
		return 0
	}
	var v float64
	if err := n.Decode(&v); err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		p.fail(n, field, "%q is not a number", n.Value)
		return 0
	}
	return v
}

// count reads a required whole number within 1 to limit.
func (p *scenarioParser) count(n *yaml.Node, field string, limit int) int {
	v := p.number(n, field, true)
	if v < 1 || v > float64(limit) || v != math.Trunc(v) {
		if n.Kind != 0 {
			p.fail(n, field, "%q is not a whole number within 1 to %d", n.Value, limit)
		}
		return 0
	}
	return int(v)
}

func (p *scenarioParser) boolean(n *yaml.Node, field string) bool {
	var v bool
	if !p.scalar(n, field) {
		return false
	}
	if err := n.Decode(&v); err != nil {
		p.fail(n, field, "%q is not true or false", n.Value)
	}
	return v
}

// name reads a unique, non-empty name and records it in seen.
func (p *scenarioParser) name(n *yaml.Node, field string, seen map[string]bool) string {
	if p.missing(n, field) || !p.scalar(n, field) {
		return ""
	}
	switch {
	case n.Value == "":
		p.fail(n, field, "must not be empty")
	case seen[n.Value]:
		p.fail(n, field, "%q is used twice", n.Value)
	}
	seen[n.Value] = true
	return n.Value
}

func (p *scenarioParser) within(n *yaml.Node, field string, at, duration time.Duration) {
	if at < 0 || (duration > 0 && at >= duration) {
		p.fail(n, field, "%s is not within the scenario's 0s to %s", at, duration)
	}
}
