package main

// manifold steer --config FILE: the live steering controller. It campaigns in the
// fleet store's election; the leader decides every interval and writes the shares
// that the fleet's nodes apply (README: Global steering).

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/fleet"
)

func steerLiveCmd(args []string) error {
	fs := flag.NewFlagSet("steer", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfgPath := fs.String("config", "", "the controller's file: the fleet section and steer")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%v\n%s", err, steerUsage)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q\n%s", fs.Arg(0), steerUsage)
	}
	if *cfgPath == "" {
		return fmt.Errorf("--config FILE is required\n%s", steerUsage)
	}
	cfg, err := config.LoadSteer(*cfgPath)
	if err != nil {
		return err
	}
	cli, err := fleet.Dial(cfg.Fleet)
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	log.Info("steering controller starting", "name", cfg.Name, "prefix", cfg.Fleet.Prefix, "interval", cfg.Interval, "lease", cfg.Lease)
	return fleet.NewController(cli, cfg.Fleet.Prefix, cfg.Name, cfg.Interval, cfg.Lease, log).Run(ctx)
}
