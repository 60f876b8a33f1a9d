package main

// manifold steer --config FILE: the live steering controller. It campaigns in the
// fleet store's election; the leader decides every interval and writes the shares
// that the fleet's nodes apply (docs/steering.md).

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/fleet"
	"github.com/manifoldlb/manifold/internal/listen"
	"github.com/manifoldlb/manifold/internal/metrics"
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
	ctl := fleet.NewController(cli, cfg.Fleet.Prefix, cfg.Name, cfg.Interval, cfg.Lease, log)
	if cfg.Metrics != "" {
		stop, err := serveSteerMetrics(cfg.Metrics, ctl, cfg.Name, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	return ctl.Run(ctx)
}

// serveSteerMetrics serves the controller's GET /metrics on addr until the returned
// func is called.
func serveSteerMetrics(addr string, ctl *fleet.Controller, name string, log *slog.Logger) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("steer.metrics: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics.SteerHandler(func() metrics.SteerSnapshot {
		return metrics.SteerSnapshot{Controller: name, Leading: ctl.Leading(), Rounds: ctl.Rounds(), Services: ctl.Written()}
	}))
	// owned by steerLiveCmd: closed by the returned func before it returns
	srv := listen.ServeHTTP(ln, mux, listen.HTTPOptions{Log: log})
	log.Info("metrics listening", "address", ln.Addr().String())
	return srv.Close, nil
}
