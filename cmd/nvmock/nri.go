package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/ibshim/ibd"
	"github.com/nvmock/nvmock/ibshim/umad"
	"github.com/nvmock/nvmock/live"
	"github.com/nvmock/nvmock/plugin/inject"
	nriplugin "github.com/nvmock/nvmock/plugin/nri"
)

const nriUsage = `Usage:
  nvmock nri [--socket PATH] [--idx NN] [--overlay-root DIR]
             [--namespace-label KEY=VALUE] [--namespaces NS,NS|*]
             [--default-gpus all|none|N|LIST] [--plugin-namespace NS]
             [--allow-real-driver] [--accept-volume-mounts]
             [--listen ADDR] [--log-level LEVEL]
             [--ib-listen ADDR] [--ib-peers ADDR,...] [--ib-peers-dns NAME]
`

// nriCmd runs the NRI plugin until SIGTERM or SIGINT.
func nriCmd(args []string) error {
	fs := flag.NewFlagSet("nri", flag.ContinueOnError)
	socket := fs.String("socket", nriplugin.DefaultSocket, "NRI socket to connect to")
	idx := fs.String("idx", nriplugin.DefaultPluginIdx, "plugin index when not launched by the runtime ($NRI_PLUGIN_IDX wins)")
	root := fs.String("overlay-root", hostprep.DefaultRoot, "directory nvmock hostprep install used")
	nsLabel := fs.String("namespace-label", nriplugin.DefaultNamespaceLabel, "KEY=VALUE label that opts a namespace in (in a cluster)")
	namespaces := fs.String("namespaces", "", "comma list of namespaces injected without the namespace label; * is all")
	defGPUs := fs.String("default-gpus", "all", "GPUs a container gets when nothing else says: all, none, a count, or a list")
	ownNS := fs.String("plugin-namespace", os.Getenv("POD_NAMESPACE"), "the plugin's own namespace, never injected")
	realDriver := fs.Bool("allow-real-driver", false, "inject even where a real NVIDIA driver is loaded")
	nvRuntimes := fs.String("nvidia-runtime-handlers", strings.Join(inject.DefaultNvidiaRuntimeHandlers, ","),
		"comma list of runtime handlers that run NVIDIA's container runtime in CDI mode: their pods get only the snapshot from the plugin; empty: none")
	volumeMounts := fs.Bool("accept-volume-mounts", false,
		"read a device plugin's volume-mounts list (/dev/null mounts under /var/run/nvidia-container-devices), as NVIDIA's runtime does with accept-nvidia-visible-devices-as-volume-mounts (pods of --nvidia-runtime-handlers: always; their runtime decides)")
	listen := fs.String("listen", ":9464", "address for /healthz, /readyz and /metrics; empty disables")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	// Named here, not by peerFlags.add: the chart's tests read nri's flags
	// from this function.
	peers := peerFlags{prefix: "ib-"}
	fs.StringVar(&peers.listen, "ib-listen", "", peerListenUsage)
	fs.StringVar(&peers.peers, "ib-peers", "", peerPeersUsage)
	fs.StringVar(&peers.dns, "ib-peers-dns", "", peerDNSUsage)
	if err := parseFlags(fs, args, os.Stdout, nriUsage); err != nil {
		return helpShown(err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("nri: unexpected argument %q (see nvmock nri --help)", fs.Arg(0))
	}
	if err := peers.check(); err != nil {
		return fmt.Errorf("nri: %w", err)
	}

	logger := logrus.New()
	logger.SetOutput(os.Stderr)
	lvl, err := logrus.ParseLevel(*level)
	if err != nil {
		return fmt.Errorf("nri: --log-level %q: use debug, info, warn or error", *level)
	}
	logger.SetLevel(lvl)
	log := logrus.NewEntry(logger).WithField("component", "nri")
	live.Warn = func(msg string) { log.Warn(msg) }

	cfg := inject.Config{
		Namespaces:          splitList(*namespaces),
		OwnNamespace:        *ownNS,
		DefaultGPUs:         *defGPUs,
		AllowWithRealDriver: *realDriver,
		// Not splitList's nil for "": an empty flag means no handler at all.
		NvidiaRuntimeHandlers: append([]string{}, splitList(*nvRuntimes)...),
		Extensions:            []inject.Extension{inject.InfiniBand},
		AcceptVolumeMounts:    *volumeMounts,
	}
	opt := nriplugin.Options{Socket: *socket, PluginIdx: *idx, OverlayRoot: *root, Inject: cfg, NamespaceLabel: *nsLabel, Log: log}
	kube, inCluster, err := hostprep.InClusterClient()
	if err != nil {
		return fmt.Errorf("nri: %w", err)
	}
	if inCluster {
		opt.Kube = kube
	}
	p, err := nriplugin.New(opt)
	if err != nil {
		return fmt.Errorf("nri: %w", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var srv *http.Server
	if *listen != "" {
		l, err := net.Listen("tcp", *listen)
		if err != nil {
			return fmt.Errorf("nri: --listen %s: %w", *listen, err)
		}
		srv = &http.Server{Handler: p.Handler(), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.WithError(err).Error("health and metrics server stopped")
			}
		}()
	}
	if stopFabric, err := serveFabric(*root, &peers, logger); err != nil {
		// Why not fatal: a node without its fabric still has GPUs; MADs
		// time out as on a broken fabric.
		log.WithError(err).Error("InfiniBand fabric daemon not started")
	} else {
		defer stopFabric()
	}
	log.WithFields(logrus.Fields{"socket": *socket, "overlay_root": *root, "namespaces": cfg.Namespaces,
		"in_cluster": inCluster, "listen": *listen}).Info("starting")
	err = p.Run(ctx)
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = srv.Shutdown(sctx)
		cancel()
	}
	if err != nil {
		return fmt.Errorf("nri: %w", err)
	}
	log.Info("stopped")
	return nil
}

// splitList splits a comma list, dropping spaces around entries; "" is nil.
func splitList(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	out := strings.Split(s, ",")
	for i := range out {
		out[i] = strings.TrimSpace(out[i])
	}
	return out
}

// serveFabric runs the node's fabric daemon (nvmock ibd) for the overlay
// installed in root, at root's IBSocket, when it has InfiniBand.
func serveFabric(root string, peers *peerFlags, logger *logrus.Logger) (stop func(), err error) {
	overlay, err := filepath.EvalSymlinks(filepath.Join(root, "driver"))
	if err != nil {
		return nil, err
	}
	node, fab, err := hostprep.LoadFabric(filepath.Dir(overlay))
	if err != nil || node == nil {
		return func() {}, err
	}
	sock := filepath.Join(root, hostprep.IBSocket)
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		return nil, err
	}
	l, err := ibd.Listen(sock)
	if err != nil {
		return nil, err
	}
	word, _ := os.ReadFile(sock + umad.IDSuffix)
	d := ibd.New(node, fab, logger)
	d.FollowFaults(filepath.Join(hostprep.IBLiveDir(filepath.Join(root, hostprep.StateFile)), hostprep.IBLiveFaults))
	go d.Serve(l)
	stopPeers, err := peers.start(d, logger.WithField("component", "ibd"))
	if err != nil {
		l.Close()
		leaveSocket(sock, word)
		return nil, err
	}
	logger.WithFields(logrus.Fields{"component": "ibd", "socket": sock, "host": fab.Hosts[fab.Local], "slot": fab.Local, "listen": peers.listen, "peers": peers.peers, "peersDNS": peers.dns}).Info("fabric daemon serving")
	// As nvmock ibd: the socket goes, unless the next pod's daemon
	// already listens there.
	return func() { stopPeers(); l.Close(); leaveSocket(sock, word) }, nil
}
