package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/presenced/presenced/store"
)

const installPgBouncer = "install pgbouncer (apt-get install pgbouncer)"

// PgBouncer runs a private pgbouncer in front of the test PostgreSQL with
// the given pool_mode ("transaction", "session") and a pool of poolSize
// server connections per database and login, stopped at test end. It
// returns url (a DSN of the test server, with its database and login) with
// the host and port of the pooler instead.
func PgBouncer(t testing.TB, url, poolMode string, poolSize int) string {
	t.Helper()
	return NewPgBouncer(t, url, poolMode, poolSize).URL
}

// Pooler is a running private pgbouncer (NewPgBouncer).
type Pooler struct {
	// URL is the upstream DSN with the pooler's host and port.
	URL string
	t   testing.TB
	bin string
	dir string
	ini string
	mu  sync.Mutex
	cmd *exec.Cmd
	// exited gets the process's end.
	exited chan error
	addr   string
}

// NewPgBouncer is PgBouncer returning the pooler, for drills that restart it.
func NewPgBouncer(t testing.TB, url, poolMode string, poolSize int) *Pooler {
	t.Helper()
	bin, err := findTool("pgbouncer")
	if err != nil {
		t.Fatalf("this test needs pgbouncer: %s", installPgBouncer)
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatalf("pgbouncer upstream: %v", err)
	}
	dir, err := os.MkdirTemp("", "presenced-pgbouncer-")
	if err != nil {
		t.Fatalf("pgbouncer: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	// Trust authentication, like the test server: the login must still be
	// listed in the auth file.
	users := fmt.Sprintf("%q \"\"\n%q \"\"\n", cfg.User, store.DevReadOnlyLogin)
	if err := os.WriteFile(filepath.Join(dir, "users.txt"), []byte(users), 0o644); err != nil {
		t.Fatalf("pgbouncer: %v", err)
	}
	p := &Pooler{t: t, bin: bin, dir: dir}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := store.FreePort()
		if err != nil {
			t.Fatalf("pgbouncer: %v", err)
		}
		ini := fmt.Sprintf(`[databases]
* = host=%s port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 500
ignore_startup_parameters = extra_float_digits
logfile = %s
pidfile = %s
`, cfg.Host, cfg.Port, port, filepath.Join(dir, "users.txt"), poolMode, poolSize,
			filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
		p.ini = filepath.Join(dir, "pgbouncer.ini")
		if err := os.WriteFile(p.ini, []byte(ini), 0o644); err != nil {
			t.Fatalf("pgbouncer: %v", err)
		}
		p.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if lastErr = p.start(); lastErr != nil {
			continue
		}
		t.Cleanup(p.stop)
		cfg.Host, cfg.Port = "127.0.0.1", uint16(port)
		pw := ""
		if cfg.Password != "" {
			pw = ":" + cfg.Password
		}
		p.URL = fmt.Sprintf("postgres://%s%s@%s/%s?sslmode=disable", cfg.User, pw, p.addr, cfg.Database)
		return p
	}
	t.Fatalf("pgbouncer did not start: %v", lastErr)
	return nil
}

func (p *Pooler) start() error {
	cmd := exec.Command(p.bin, p.ini)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if os.Geteuid() == 0 {
		// pgbouncer refuses to run as root.
		cred, err := postgresUser()
		if err != nil {
			p.t.Fatalf("pgbouncer: %v", err)
		}
		cmd.SysProcAttr.Credential = cred
		_ = os.Chown(p.dir, int(cred.Uid), int(cred.Gid))
		for _, f := range []string{"users.txt", "pgbouncer.ini", "pgbouncer.log"} {
			_ = os.Chown(filepath.Join(p.dir, f), int(cred.Uid), int(cred.Gid))
		}
		_ = os.Chmod(p.dir, 0o755)
	}
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start pgbouncer: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := waitListening(p.addr, exited, 30*time.Second); err != nil {
		_ = cmd.Process.Kill()
		log, _ := os.ReadFile(filepath.Join(p.dir, "pgbouncer.log"))
		return fmt.Errorf("%w: %s", err, lastLinesOf(string(log), 3))
	}
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()
	return nil
}

// stop ends the pooler (SIGTERM: every client connection cut at once).
func (p *Pooler) stop() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// Restart stops the pooler, waits down, and starts it again on its port.
func (p *Pooler) Restart(down time.Duration) {
	p.t.Helper()
	p.stop()
	time.Sleep(down)
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := p.start()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("restart pgbouncer: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitListening polls addr until it accepts, the process exits or timeout.
func waitListening(addr string, exited <-chan error, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("exited before listening on %s: %v", addr, err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening on %s within %s", addr, timeout)
		}
	}
}

// postgresUser is the account PostgreSQL's tools run as when the tests run
// as root.
func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs a 'postgres' system user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// findTool finds a program on PATH, in the system folders of root's PATH
// (Debian installs servers into /usr/sbin) or where go install puts it.
func findTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	dirs := []string{"/usr/sbin", "/usr/local/sbin", "/sbin"}
	if gobin := os.Getenv("GOBIN"); gobin != "" {
		dirs = append(dirs, gobin)
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, p := range filepath.SplitList(strings.TrimSpace(string(out))) {
			dirs = append(dirs, filepath.Join(p, "bin"))
		}
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on PATH, in /usr/sbin or in go install's folder", name)
}

// Tool is the path of an installed program the tests need (see findTool);
// it fails the test with install, which says how to get it.
func Tool(t testing.TB, name, install string) string {
	t.Helper()
	p, err := findTool(name)
	if err != nil {
		t.Fatalf("this test needs %s: %s", name, install)
	}
	return p
}

func lastLinesOf(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
