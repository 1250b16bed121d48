package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// EmbeddedPostgres is a private PostgreSQL cluster in a data folder, started
// from the local server binaries for single-node development.
type EmbeddedPostgres struct {
	Dir     string
	Port    int
	bin     string
	cred    *syscall.Credential
	started bool // false when an already running server was adopted
	// users holds this process's shared lock on the folder while it uses a
	// server shared by every process on the folder (embedded_users.go);
	// not shared: a replica, whose life is its caller's alone.
	shared bool
	users  *os.File
	log    *slog.Logger
}

// DevDatabase and the two logins created in a private cluster.
const (
	DevDatabase      = "presenced"
	DevOwner         = "presenced"
	DevReadOnlyLogin = "presenced_readonly"
)

// ErrNoPostgres says neither a DSN nor server binaries are available.
var ErrNoPostgres = errors.New("no PostgreSQL: set postgres.url (PRESENCED_POSTGRES_URL or --postgres-url) or install the PostgreSQL server binaries (apt-get install postgresql, brew install postgresql@16), or point postgres.bin_dir at them")

// FindPostgresBinaries returns the folder holding initdb and pg_ctl: binDir if
// given, else PATH, else the usual Debian and Homebrew locations.
func FindPostgresBinaries(binDir string) (string, error) {
	has := func(dir string) bool {
		for _, b := range []string{"initdb", "pg_ctl", "postgres"} {
			if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.IsDir() {
				return false
			}
		}
		return true
	}
	if binDir != "" {
		if has(binDir) {
			return binDir, nil
		}
		return "", fmt.Errorf("postgres.bin_dir %s holds no initdb, pg_ctl and postgres", binDir)
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		// Debian links pg_ctl into PATH; resolve it to find its siblings.
		if real, err := filepath.EvalSymlinks(p); err == nil && has(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
		if has(filepath.Dir(p)) {
			return filepath.Dir(p), nil
		}
	}
	var candidates []string
	for _, pattern := range []string{
		"/usr/lib/postgresql/*/bin",
		"/usr/local/pgsql/bin",
		"/opt/homebrew/opt/postgresql@*/bin",
		"/usr/local/opt/postgresql@*/bin",
		"/opt/homebrew/opt/postgresql/bin",
		"/usr/local/opt/postgresql/bin",
		"/Applications/Postgres.app/Contents/Versions/latest/bin",
	} {
		m, _ := filepath.Glob(pattern)
		candidates = append(candidates, m...)
	}
	// Highest version first: /usr/lib/postgresql/16 before 15.
	sort.Slice(candidates, func(i, j int) bool { return versionOf(candidates[i]) > versionOf(candidates[j]) })
	for _, dir := range candidates {
		if has(dir) {
			return dir, nil
		}
	}
	return "", ErrNoPostgres
}

func versionOf(path string) int {
	for _, part := range strings.FieldsFunc(path, func(r rune) bool { return r == '/' || r == '@' }) {
		if n, err := strconv.Atoi(part); err == nil {
			return n
		}
	}
	return 0
}

// StartEmbeddedPostgres initialises dir on first use, starts the server on a
// free loopback port (or adopts one already running on dir) and makes sure the
// development database and logins exist.
func StartEmbeddedPostgres(ctx context.Context, dir, binDir string, log *slog.Logger) (*EmbeddedPostgres, error) {
	bin, err := FindPostgresBinaries(binDir)
	if err != nil {
		return nil, err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("embedded postgres: %w", err)
	}
	ep := &EmbeddedPostgres{Dir: dir, bin: bin, log: log, shared: true}
	if err := ep.prepareOwner(); err != nil {
		return nil, err
	}
	if ep.users, err = joinUsers(dir); err != nil {
		return nil, err
	}
	if err := ep.startOrReuse(ctx); err != nil {
		ep.leave()
		return nil, err
	}
	if err := ep.bootstrap(ctx); err != nil {
		_ = ep.Stop()
		return nil, err
	}
	return ep, nil
}

func (ep *EmbeddedPostgres) startOrReuse(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(ep.Dir, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if err := ep.initdb(ctx); err != nil {
			return err
		}
	}
	if port, ok := runningPort(ep.Dir); ok {
		ep.Port = port
		ep.log.Info("reusing the private PostgreSQL already running on the data folder", "dir", ep.Dir, "port", port)
		return nil
	}
	err := ep.start(ctx)
	if port, ok := runningPort(ep.Dir); err != nil && ok {
		// Another process started it between our look and our start.
		ep.Port = port
		ep.log.Info("reusing the private PostgreSQL already running on the data folder", "dir", ep.Dir, "port", port)
		return nil
	}
	return err
}

// URL is the DSN of the development database for login.
func (ep *EmbeddedPostgres) URL(login string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", login, ep.Port, DevDatabase)
}

// AdminURL connects as the owner to the maintenance database.
func (ep *EmbeddedPostgres) AdminURL() string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", DevOwner, ep.Port)
}

// StartedHere tells whether this process started the server (and will stop
// it), as opposed to reusing one already running on the data folder.
func (ep *EmbeddedPostgres) StartedHere() bool { return ep.started }

// Stop shuts the server down when this process is the last one using it
// (whoever started it: a server left behind by a crashed process is
// stopped by the next one to leave), and leaves it running for the others
// otherwise. A server not shared (a replica) is stopped if this process
// started it.
func (ep *EmbeddedPostgres) Stop() error {
	if ep.shared {
		defer ep.leave()
		if ep.users == nil || !lastUser(ep.users) {
			ep.started = false
			return nil
		}
		if _, running := runningPort(ep.Dir); !running {
			return nil
		}
	} else if !ep.started {
		return nil
	}
	ep.started = false
	out, err := ep.run(context.Background(), "pg_ctl", "-D", ep.Dir, "-m", "fast", "-w", "-t", "30", "stop")
	if err != nil {
		return fmt.Errorf("stop private postgres: %v: %s", err, out)
	}
	return nil
}

// leave lets go of the users lock.
func (ep *EmbeddedPostgres) leave() {
	if ep.users != nil {
		_ = ep.users.Close()
		ep.users = nil
	}
}

// prepareOwner picks the account the server runs as. PostgreSQL refuses to
// run as root, so as root the data folder is handed to the postgres user.
func (ep *EmbeddedPostgres) prepareOwner() error {
	if err := os.MkdirAll(ep.Dir, 0o700); err != nil {
		return fmt.Errorf("embedded postgres: create %s: %w", ep.Dir, err)
	}
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("embedded postgres: running as root needs a 'postgres' system user to own the server (PostgreSQL refuses root): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	ep.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	if err := filepath.Walk(ep.Dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	}); err != nil {
		return fmt.Errorf("embedded postgres: hand %s to the postgres user: %w", ep.Dir, err)
	}
	// The server must be able to reach its folder: open up the parents this
	// process owns (temp folders are 0700) for traversal only.
	for p := filepath.Dir(ep.Dir); p != "/" && p != "."; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			break
		}
		if st.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(p, st.Mode().Perm()|0o011); err != nil {
				return fmt.Errorf("embedded postgres: make %s traversable for the postgres user: %w", p, err)
			}
		}
	}
	return nil
}

func (ep *EmbeddedPostgres) run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(ep.bin, name), args...)
	cmd.Dir = ep.Dir
	attr := childProcAttr()
	attr.Pdeathsig = 0 // the server outlives pg_ctl by design
	attr.Credential = ep.cred
	cmd.SysProcAttr = attr
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C")
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func (ep *EmbeddedPostgres) initdb(ctx context.Context) error {
	ep.log.Info("initialising a private PostgreSQL cluster", "dir", ep.Dir, "binaries", ep.bin)
	out, err := ep.run(ctx, "initdb", "-D", ep.Dir, "-U", DevOwner, "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	if err != nil {
		return fmt.Errorf("initdb %s: %v: %s", ep.Dir, err, lastLines(out, 5))
	}
	return nil
}

// start runs the server on a free port, moving to another port when one
// is taken between the check and the server's bind.
func (ep *EmbeddedPostgres) start(ctx context.Context) error {
	const attempts = 5
	for attempt := 1; ; attempt++ {
		port, err := FreePort()
		if err != nil {
			return err
		}
		err = ep.startOn(ctx, port)
		if err == nil {
			return nil
		}
		if attempt < attempts && strings.Contains(err.Error(), "Address already in use") {
			continue
		}
		return err
	}
}

// Resume starts a server this process stopped again, on its old port, so
// clients reconnect to the address they knew (fault drills).
func (ep *EmbeddedPostgres) Resume(ctx context.Context) error {
	if ep.started {
		return nil
	}
	if ep.shared && ep.users == nil {
		users, err := joinUsers(ep.Dir)
		if err != nil {
			return err
		}
		ep.users = users
	}
	return ep.startOn(ctx, ep.Port)
}

func (ep *EmbeddedPostgres) startOn(ctx context.Context, port int) error {
	logFile := filepath.Join(ep.Dir, "server.log")
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c max_connections=200 -c fsync=off -c synchronous_commit=off -c full_page_writes=off", port)
	out, err := ep.run(ctx, "pg_ctl", "-D", ep.Dir, "-l", logFile, "-w", "-t", "60", "-o", opts, "start")
	if err == nil {
		ep.Port, ep.started = port, true
		return nil
	}
	tail := lastLines(fileTail(logFile, 8<<10), 3)
	return fmt.Errorf("start private postgres in %s on port %d: %v: %s; server log: %s (see %s)", ep.Dir, port, err, lastLines(out, 3), tail, logFile)
}

// runningPort reads postmaster.pid of a live server on dir.
func runningPort(dir string) (int, bool) {
	data, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	lines := strings.Split(string(data), "\n")
	if len(lines) < 4 {
		return 0, false
	}
	pid, err1 := strconv.Atoi(strings.TrimSpace(lines[0]))
	port, err2 := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err1 != nil || err2 != nil || pid <= 0 {
		return 0, false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return 0, false // stale file of a crashed server; pg_ctl start handles it
	}
	return port, true
}

// connectAdmin connects as the owner, waiting while a server found running
// still starts up (its postmaster.pid is written before it listens).
func (ep *EmbeddedPostgres) connectAdmin(ctx context.Context) (*pgx.Conn, error) {
	for {
		conn, err := pgx.Connect(ctx, ep.AdminURL())
		if err == nil || ctx.Err() != nil {
			return conn, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// bootstrap creates the development database and the read-only login.
func (ep *EmbeddedPostgres) bootstrap(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := ep.connectAdmin(ctx)
	if err != nil {
		return fmt.Errorf("connect to private postgres: %w", err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", DevDatabase).Scan(&exists); err != nil {
		return fmt.Errorf("bootstrap private postgres: %w", err)
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{DevDatabase}.Sanitize()); err != nil && !isDuplicate(err) {
			return fmt.Errorf("bootstrap private postgres: create database: %w", err)
		}
	}
	return EnsureReadOnlyLogin(ctx, conn, DevReadOnlyLogin)
}

// EnsureReadOnlyLogin creates a login that may connect and SELECT only.
func EnsureReadOnlyLogin(ctx context.Context, conn *pgx.Conn, login string) error {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", login).Scan(&exists); err != nil {
		return fmt.Errorf("read-only login: %w", err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE ROLE "+pgx.Identifier{login}.Sanitize()+" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE"); err != nil && !isDuplicate(err) {
		return fmt.Errorf("create read-only login: %w", err)
	}
	return nil
}

func isDuplicate(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "already exists") || strings.Contains(err.Error(), "duplicate key"))
}

// fileTail returns up to the last n bytes of a file (server logs grow).
func fileTail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// DevPostgresURL is the DSN of a private development cluster running on
// dataDir/postgres, for tools run beside a development server.
func DevPostgresURL(dataDir string) (string, bool) {
	dir, err := filepath.Abs(filepath.Join(dataDir, "postgres"))
	if err != nil {
		return "", false
	}
	port, ok := runningPort(dir)
	if !ok {
		return "", false
	}
	ep := &EmbeddedPostgres{Dir: dir, Port: port}
	return ep.URL(DevOwner), true
}

// StopImmediate stops the server as `pg_ctl stop -m immediate` does:
// every connection cut at once, no shutdown checkpoint; Resume recovers
// it (fault drills).
func (ep *EmbeddedPostgres) StopImmediate() error {
	if !ep.started {
		return nil
	}
	ep.started = false
	out, err := ep.run(context.Background(), "pg_ctl", "-D", ep.Dir, "-m", "immediate", "-w", "-t", "30", "stop")
	if err != nil {
		return fmt.Errorf("stop private postgres (immediate): %v: %s", err, out)
	}
	return nil
}

// Kill ends the server as a crash does: SIGKILL to the postmaster and
// every backend (pg_ctl starts the postmaster as a session leader, so they
// share its process group). Resume starts it again through crash recovery
// (fault drills).
func (ep *EmbeddedPostgres) Kill() error {
	pid, ok := postmasterPID(ep.Dir)
	if !ok {
		return fmt.Errorf("kill private postgres: no postmaster.pid in %s", ep.Dir)
	}
	ep.started = false
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("kill private postgres: pid %d still running", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The postmaster is not our child: where nothing reaps it, it stays a
	// zombie, which the next server would take for a live owner of the
	// data folder.
	_ = os.Remove(filepath.Join(ep.Dir, "postmaster.pid"))
	return nil
}

// postmasterPID reads the server's process id from dir's postmaster.pid.
func postmasterPID(dir string) (int, bool) {
	data, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(data), "\n", 2)[0]))
	return pid, err == nil && pid > 0
}

// processAlive tells whether pid runs (a zombie does not).
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // no /proc: trust kill
	}
	// "pid (comm) S ...": the state follows the last ')'.
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}
