package main

// manifold kube-controller: gives Services of type LoadBalancer their addresses from
// the IPPools of the cluster (internal/kube).

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/manifoldlb/manifold/internal/kube"
)

const kubeControllerUsage = `Usage: manifold kube-controller [--kubeconfig FILE] [--default-class] [--namespace NS]
  --kubeconfig FILE   the cluster to serve (default: in the cluster, the Pod's ServiceAccount)
  --default-class     also serve LoadBalancer Services that name no loadBalancerClass
  --namespace NS      namespace of the Lease that elects the one active replica (default manifold-system)`

// kubeControllerCmd runs `manifold kube-controller` in the foreground, in the cluster
// (the Pod's ServiceAccount) or with --kubeconfig FILE; SIGTERM or SIGINT stop it and
// give up its Lease, so that a standby takes over at once.
func kubeControllerCmd(args []string) error {
	fs := flag.NewFlagSet("kube-controller", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: the Pod's ServiceAccount, in the cluster)")
	defaultClass := fs.Bool("default-class", false, "also serve LoadBalancer Services that name no loadBalancerClass")
	namespace := fs.String("namespace", "manifold-system", "namespace of the Lease that elects the one active replica")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%v\n%s", err, kubeControllerUsage)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q\n%s", fs.Arg(0), kubeControllerUsage)
	}
	cfg, err := kube.RESTConfig(*kubeconfig)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return kube.Run(ctx, kube.Options{
		Config:       cfg,
		DefaultClass: *defaultClass,
		Namespace:    *namespace,
		Log:          slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
}
