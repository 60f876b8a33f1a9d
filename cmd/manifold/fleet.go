package main

// manifold fleet: seed and read the fleet store (etcd) from the command line.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/fleet"
	"github.com/manifoldlb/manifold/internal/store"
)

const fleetUsage = `usage: manifold fleet COMMAND
  import --config FLEET.yaml --services FILE.yaml [--force]
      put the services of FILE.yaml (any node config file, e.g. the one a node ran
      before it joined the fleet) into the fleet store that FLEET.yaml's fleet section
      names; refuses a store that has services already, unless --force (which replaces
      them all, in one transaction)
  export --config FLEET.yaml
      print the fleet's services as the services section of a config file`

func fleetCmd(args []string, w io.Writer) error {
	if len(args) == 0 {
		return errors.New(fleetUsage)
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("fleet "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfgPath := fs.String("config", "", "a node config file with the fleet section")
	from := fs.String("services", "", "import: the config file whose services to import")
	force := fs.Bool("force", false, "import: replace the services the store has")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%v\n%s", err, fleetUsage)
	}
	if *cfgPath == "" {
		return fmt.Errorf("--config FLEET.yaml is required\n%s", fleetUsage)
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	if cfg.Fleet == nil {
		return fmt.Errorf("%s has no fleet section: it names no fleet store", *cfgPath)
	}
	dial := fleet.Dial
	if cmd == "import" {
		dial = fleet.DialImport
	}
	cli, err := dial(*cfg.Fleet)
	if err != nil {
		return err
	}
	defer cli.Close()
	// the store's requests are bounded, not the reading of the file before them (100 000
	// services take longer than that to parse on a busy machine)
	storeCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 30*time.Second)
	}
	switch cmd {
	case "import":
		if *from == "" {
			return fmt.Errorf("import: --services FILE.yaml is required\n%s", fleetUsage)
		}
		src, err := store.Open(*from)
		if err != nil {
			return err
		}
		docs, err := store.ServiceDocsOf(src)
		if err != nil {
			return err
		}
		ctx, cancel := storeCtx()
		defer cancel()
		if err := fleet.Import(ctx, cli, cfg.Fleet.Prefix, docs, *force); err != nil {
			return err
		}
		fmt.Fprintf(w, "imported %d services from %s into %s\n", len(docs), *from, cfg.Fleet.Prefix)
		return nil
	case "export":
		ctx, cancel := storeCtx()
		defer cancel()
		docs, err := fleet.Export(ctx, cli, cfg.Fleet.Prefix)
		if err != nil {
			return err
		}
		out, err := store.ExportSection(docs)
		if err != nil {
			return err
		}
		_, err = w.Write(out)
		return err
	}
	return fmt.Errorf("unknown command %q\n%s", cmd, fleetUsage)
}
