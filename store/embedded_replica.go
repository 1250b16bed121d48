package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// StartReplica makes dir a streaming replica of this server with
// pg_basebackup (as the owner login, over the server's default trust rule
// for replication from loopback) and starts it on a free loopback port. The
// replica has the primary's logins and databases and follows it until
// stopped. For tests and scripts/cluster-up: production replicas are the
// database team's.
func (ep *EmbeddedPostgres) StartReplica(ctx context.Context, dir string) (*EmbeddedPostgres, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	rep := &EmbeddedPostgres{Dir: dir, bin: ep.bin, log: ep.log}
	if err := rep.prepareOwner(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		// -R writes standby.signal and primary_conninfo; -X stream copies
		// the WAL written during the backup, so the copy starts consistent.
		out, err := rep.run(ctx, "pg_basebackup", "-h", "127.0.0.1", "-p", fmt.Sprint(ep.Port), "-U", DevOwner,
			"-D", dir, "-R", "-X", "stream", "-c", "fast", "--no-sync")
		if err != nil {
			return nil, fmt.Errorf("pg_basebackup into %s: %v: %s", dir, err, lastLines(out, 5))
		}
		// pg_basebackup leaves the folder as the primary's (0700 needed).
		if err := os.Chmod(dir, 0o700); err != nil {
			return nil, fmt.Errorf("replica: %w", err)
		}
	}
	if port, ok := runningPort(dir); ok {
		rep.Port = port
		return rep, nil
	}
	if err := rep.start(ctx); err != nil {
		return nil, err
	}
	return rep, nil
}

// Promote ends the replica's recovery: it becomes a primary that accepts
// writes, on the same port (a failover; the old primary must be gone).
func (ep *EmbeddedPostgres) Promote(ctx context.Context) error {
	out, err := ep.run(ctx, "pg_ctl", "-D", ep.Dir, "-w", "-t", "60", "promote")
	if err != nil {
		return fmt.Errorf("promote %s: %v: %s", ep.Dir, err, out)
	}
	return nil
}
