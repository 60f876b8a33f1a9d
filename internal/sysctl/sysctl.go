// Package sysctl sets the kernel settings a manifold daemon needs, logs each change once,
// and puts back what it changed when the daemon stops: the node enables forwarding on
// its XDP interfaces, the backend agent sets the ARP behaviour of its VIPs.
package sysctl

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
)

// Root is where the settings are read and written; tests point it elsewhere.
var Root = "/proc/sys/"

// Changes records the settings changed, with the values found before.
type Changes struct {
	log *slog.Logger
	old map[string]string // name (net/ipv4/conf/eth0/forwarding) → value before
	// order is the order of the changes, restored in reverse.
	order []string
}

func New(log *slog.Logger) *Changes { return &Changes{log: log, old: map[string]string{}} }

// Get reads a setting ("" when it cannot be read).
func Get(name string) string {
	b, err := os.ReadFile(Root + name)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Set makes name hold value; a setting that already holds it is left alone, and only a
// real change is logged and recorded for Restore.
func (c *Changes) Set(name, value, why string) error {
	path := Root + name
	old, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("sysctl %s: %w", dotted(name), err)
	}
	was := strings.TrimSpace(string(old))
	if was == value {
		return nil
	}
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", dotted(name), value, err)
	}
	if _, seen := c.old[name]; !seen {
		c.old[name] = was
		c.order = append(c.order, name)
	}
	c.log.Info("sysctl set", "name", dotted(name), "value", value, "was", was, "why", why)
	return nil
}

// Restore puts back every setting changed, newest first; errors are logged.
func (c *Changes) Restore() {
	for i := len(c.order) - 1; i >= 0; i-- {
		name := c.order[i]
		if err := os.WriteFile(Root+name, []byte(c.old[name]), 0o644); err != nil {
			c.log.Error("restore sysctl", "name", dotted(name), "err", err)
		}
	}
	c.old, c.order = map[string]string{}, nil
}

func dotted(name string) string { return strings.ReplaceAll(name, "/", ".") }
