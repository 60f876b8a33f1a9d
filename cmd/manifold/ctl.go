package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/manifoldlb/manifold/internal/node"
)

const defaultAPI = "http://127.0.0.1:9100"

func ctl(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("ctl", flag.ContinueOnError)
	api := fs.String("api", envOr("MANIFOLD_API", defaultAPI), "node API base URL (env MANIFOLD_API)")
	output := fs.String("o", "table", "output: table | json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("usage: manifold ctl [--api URL] [-o json] status")
	}
	switch fs.Arg(0) {
	case "status":
		var st node.Status
		raw, err := getJSON(*api+"/api/v1/status", &st)
		if err != nil {
			return err
		}
		if *output == "json" {
			_, err := w.Write(raw)
			return err
		}
		printStatus(w, &st)
		return nil
	default:
		return fmt.Errorf("unknown ctl command %q (try: status)", fs.Arg(0))
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func getJSON(url string, v any) ([]byte, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the node API at %s (is `manifold run` running?): %w", url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(raw)))
	}
	return raw, json.Unmarshal(raw, v)
}

func printStatus(w io.Writer, st *node.Status) {
	var ifaces []string
	for _, i := range st.Interfaces {
		ifaces = append(ifaces, fmt.Sprintf("%s (XDP %s)", i.Name, i.XDPMode))
	}
	fmt.Fprintf(w, "Node %s   interfaces: %s   flow table: %d entries   reloads: %d (%d failed)\n\n",
		st.Node, strings.Join(ifaces, ", "), st.FlowTableEntries, st.Reloads, st.ReloadFailures)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tVIP\tBACKEND\tSTATE\tWEIGHT\tPACKETS\tBYTES")
	for _, s := range st.Services {
		vip := fmt.Sprintf("%s:%d/%s", s.VIP, s.Port, s.Protocol)
		if strings.Contains(s.VIP, ":") {
			vip = fmt.Sprintf("[%s]:%d/%s", s.VIP, s.Port, s.Protocol)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\n", s.Name, vip, "(all)", "", "", s.Packets, s.Bytes)
		for _, b := range s.Backends {
			fmt.Fprintf(tw, "\t\t%s\t%s\t%d\t%d\t%d\n", b.Address, b.State, b.Weight, b.Packets, b.Bytes)
		}
	}
	tw.Flush()
	var reasons []string
	for r, n := range st.Drops {
		if n > 0 {
			reasons = append(reasons, fmt.Sprintf("%s=%d", r, n))
		}
	}
	sort.Strings(reasons)
	if len(reasons) == 0 {
		reasons = []string{"none"}
	}
	fmt.Fprintf(w, "\nDrops: %s\n", strings.Join(reasons, " "))
}
