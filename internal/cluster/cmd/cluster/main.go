// Command cluster runs the split cluster of package cluster in the
// foreground until SIGINT or SIGTERM, then stops every process it started.
// scripts/cluster-up starts it in the background; scripts/cluster-down
// stops it.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/presenced/presenced/internal/cluster"
)

func main() {
	bin := flag.String("bin", "", "the presenced binary")
	dir := flag.String("dir", "", "state folder (stores' data, keys, logs)")
	flag.Parse()
	if *bin == "" || *dir == "" {
		flag.Usage()
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	c, err := cluster.Up(ctx, cluster.Options{Bin: *bin, Dir: *dir, Log: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
	// cluster.json tells people and scripts where everything is.
	urls := map[string]string{}
	for _, p := range cluster.Planes {
		urls[p.Name] = c.URL(p.Name)
	}
	state := map[string]any{
		"pid":        os.Getpid(),
		"redis":      c.RedisURL(),
		"postgres":   c.Primary.AdminURL(),
		"replica":    c.Replica.AdminURL(),
		"planes":     urls,
		"planePids":  c.Pids(),
		"devSecrets": filepath.Join(*dir, "data", "dev-secrets.json"),
	}
	b, _ := json.MarshalIndent(state, "", "  ")
	if err := os.WriteFile(filepath.Join(*dir, "cluster.json"), append(b, '\n'), 0o644); err != nil {
		log.Error("write cluster.json", "err", err)
	}
	fmt.Println(string(b))
	<-ctx.Done()
	log.Info("stopping the cluster")
	if err := c.Down(); err != nil {
		log.Warn("cluster down", "err", err)
	}
	_ = os.Remove(filepath.Join(*dir, "cluster.json"))
}
