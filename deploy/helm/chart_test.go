// Package helm_test renders the Helm chart with helm itself and checks what
// the chart promises: each plane's Deployment gets exactly the secrets its
// roles need (the admit plane no database credentials, booking only the
// pass verify keys), readiness on /readyz, the drain preStop, a migrations
// Job before the planes with the primary's direct URL, HPAs where a plane
// scales on load and a PodDisruptionBudget for every plane. Schema
// validation of the same manifests is scripts/helm-check.
package helm_test

import (
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/presenced/presenced/app"
	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
)

const installHelm = "bash scripts/test.sh installs it (go install helm.sh/helm/v3/cmd/helm@v3.22.0)"

// object is one rendered manifest.
type object struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name        string            `yaml:"name"`
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"metadata"`
	Spec struct {
		Template struct {
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
		ScaleTargetRef struct {
			Name string `yaml:"name"`
		} `yaml:"scaleTargetRef"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Endpoints []struct {
			Port string `yaml:"port"`
			Path string `yaml:"path"`
		} `yaml:"endpoints"`
	} `yaml:"spec"`
}

type podSpec struct {
	TerminationGracePeriodSeconds int         `yaml:"terminationGracePeriodSeconds"`
	Containers                    []container `yaml:"containers"`
}

type container struct {
	Args []string `yaml:"args"`
	Env  []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			SecretKeyRef struct {
				Name string `yaml:"name"`
				Key  string `yaml:"key"`
			} `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	ReadinessProbe struct {
		HTTPGet struct {
			Path string `yaml:"path"`
		} `yaml:"httpGet"`
	} `yaml:"readinessProbe"`
	Lifecycle struct {
		PreStop struct {
			Exec struct {
				Command []string `yaml:"command"`
			} `yaml:"exec"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
}

// secrets maps each environment variable set from a Secret to
// "<secret>/<key>".
func (c container) secrets() map[string]string {
	out := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			out[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
	}
	return out
}

func (c container) environ() []string {
	var out []string
	for _, e := range c.Env {
		out = append(out, e.Name+"="+e.Value)
	}
	return out
}

func chartDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "presenced")
}

func render(t *testing.T, valueFiles ...string) []object {
	t.Helper()
	helm := os.Getenv("PRESENCED_TEST_HELM")
	if helm == "" {
		helm = testenv.Tool(t, "helm", installHelm)
	}
	args := []string{"template", "presenced", chartDir(), "--kube-version", "1.34.0"}
	for _, f := range valueFiles {
		args = append(args, "-f", filepath.Join(chartDir(), "ci", f))
	}
	out, err := exec.Command(helm, args...).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("helm template: %v: %s", err, ee.Stderr)
	}
	require.NoError(t, err)
	var objs []object
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var o object
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if o.Kind != "" {
			objs = append(objs, o)
		}
	}
	return objs
}

func byKind(objs []object, kind string) map[string]object {
	out := map[string]object{}
	for _, o := range objs {
		if o.Kind == kind {
			out[o.Metadata.Labels["app.kubernetes.io/component"]] = o
		}
	}
	return out
}

// givenSettings maps each setting a container gets from a Secret to the
// Secret's name, and fails on a variable that sets no setting.
func givenSettings(t *testing.T, c container) map[string]string {
	t.Helper()
	byEnv := map[string]string{}
	for _, key := range config.Keys() {
		for _, env := range config.EnvNames(key) {
			byEnv[env] = key
		}
	}
	out := map[string]string{}
	for env, ref := range c.secrets() {
		key, ok := byEnv[env]
		require.True(t, ok, "%s sets no setting", env)
		out[key], _, _ = strings.Cut(ref, "/")
	}
	return out
}

// secretOf names the chart's Secret of a setting's group: one per group of
// the role table, the PostgreSQL logins all in one.
func secretOf(table app.Table, setting string) string {
	for group, settings := range table.Settings {
		if slices.Contains(settings, setting) {
			if g, _, _ := strings.Cut(group, "-"); g == "postgres" || g == "redis" {
				group = g // one Secret holds the logins of a store
			}
			var b strings.Builder
			for _, r := range group {
				if r >= 'A' && r <= 'Z' {
					b.WriteByte('-')
					r += 'a' - 'A'
				}
				b.WriteRune(r)
			}
			return "presenced-presenced-" + b.String()
		}
	}
	return ""
}

// requireTheTablesSettings checks that a plane of roles is given, from the
// Secrets of their groups, exactly the settings the role table says its
// roles need (presenced roles --json), optional ones included.
func requireTheTablesSettings(t *testing.T, c container, roles ...string) map[string]string {
	t.Helper()
	table := app.RoleTable()
	given := givenSettings(t, c)
	_, allowed := table.SettingsFor(roles...)
	keys := slices.Sorted(maps.Keys(given))
	require.Equal(t, allowed, keys, "%v: the settings of the roles' stores and secret groups, and no others", roles)
	for key, secret := range given {
		require.Equal(t, secretOf(table, key), secret, "%v: %s comes from its group's Secret", roles, key)
	}
	return given
}

func TestChartGivesEachPlaneOnlyItsSecrets(t *testing.T) {
	t.Parallel()
	objs := render(t, "full-values.yaml")
	deps := byKind(objs, "Deployment")
	var planes []string
	stores := map[string][]string{}
	for _, r := range app.Roles() {
		planes = append(planes, r.Name)
		stores[r.Name] = r.Stores
	}
	require.Len(t, deps, len(planes), "a Deployment for every role of the role table")
	const pg = "presenced-presenced-postgres/"
	for _, plane := range planes {
		d, ok := deps[plane]
		require.True(t, ok, "a Deployment for %s", plane)
		require.Len(t, d.Spec.Template.Spec.Containers, 1)
		c := d.Spec.Template.Spec.Containers[0]
		require.Equal(t, []string{"serve", "--listen", "0.0.0.0:8080", "--roles", plane}, c.Args)
		require.Empty(t, config.UnknownEnv(c.environ()), "%s: every PRESENCED_ variable is a setting", plane)
		requireTheTablesSettings(t, c, plane)
		s := c.secrets()
		for env, ref := range s {
			require.NotEqual(t, pg+"directUrl", ref, "%s: %s: the pooler-bypassing URL is the migrations Job's", plane, env)
		}
		if !slices.Contains(stores[plane], "postgres") && slices.Contains(stores[plane], "postgres-readonly") {
			require.Equal(t, pg+"readonlyUrl", s["PRESENCED_POSTGRES_URL"], "%s: its one login is the read-only one", plane)
		}

		require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path, plane)
		cmd := c.Lifecycle.PreStop.Exec.Command
		require.GreaterOrEqual(t, len(cmd), 2, "%s: a preStop hook", plane)
		require.Equal(t, "drain", cmd[1], "%s: the preStop drains sockets", plane)
		i := slices.Index(cmd, "--url")
		require.Positive(t, i, plane)
		require.Equal(t, "http://127.0.0.1:8080", cmd[i+1], plane)
		require.Greater(t, d.Spec.Template.Spec.TerminationGracePeriodSeconds, 20, "%s: room for the drain and the shutdown", plane)
	}

	hpas := byKind(objs, "HorizontalPodAutoscaler")
	for _, plane := range planes {
		_, scaled := hpas[plane]
		require.Equal(t, plane != "booking" && plane != "worker", scaled, "%s: HPA", plane)
	}
	require.Len(t, byKind(objs, "PodDisruptionBudget"), len(planes))

	jobs := byKind(objs, "Job")
	job, ok := jobs["migrate"]
	require.True(t, ok, "a migrations Job")
	require.Contains(t, job.Metadata.Annotations["helm.sh/hook"], "pre-install")
	require.Contains(t, job.Metadata.Annotations["helm.sh/hook"], "pre-upgrade")
	jc := job.Spec.Template.Spec.Containers[0]
	require.Equal(t, []string{"migrate"}, jc.Args)
	require.Equal(t, map[string]string{"PRESENCED_POSTGRES_URL": pg + "directUrl"}, jc.secrets())
	for _, o := range objs {
		if o.Kind == "Secret" && o.Metadata.Name == "presenced-presenced-postgres" {
			require.Contains(t, o.Metadata.Annotations["helm.sh/hook"], "pre-install", "the Job's Secret exists before the Job")
		}
	}

	sms := byKind(objs, "ServiceMonitor")
	require.Len(t, sms, 1)
	for _, sm := range sms {
		require.Equal(t, "/metrics", sm.Spec.Endpoints[0].Path)
		for plane, svc := range byKind(objs, "Service") {
			for k, v := range sm.Spec.Selector.MatchLabels {
				require.Equal(t, v, svc.Metadata.Labels[k], "the ServiceMonitor selects the %s Service", plane)
			}
		}
	}
}

// Two planes per process, as docker-compose.yml runs them: each process
// gets the union of its roles' secrets, and still the edge (which admits)
// gets only the read-only login for its browse role.
func TestChartUnionsSecretsOfCombinedPlanes(t *testing.T) {
	t.Parallel()
	deps := byKind(render(t, "full-values.yaml", "two-planes-values.yaml"), "Deployment")
	require.Len(t, deps, 2)
	requireTheTablesSettings(t, deps["edge"].Spec.Template.Spec.Containers[0], "ingest", "count", "presence", "admit", "browse")
	requireTheTablesSettings(t, deps["core"].Spec.Template.Spec.Containers[0], "booking", "worker")
	edge := deps["edge"].Spec.Template.Spec.Containers[0].secrets()
	core := deps["core"].Spec.Template.Spec.Containers[0].secrets()
	require.Contains(t, edge, "PRESENCED_WAITINGROOM_SIGNING_KEY")
	require.Contains(t, edge, "PRESENCED_VIEWERS_COOKIE_SIGNING_KEY")
	require.Equal(t, "presenced-presenced-postgres/url", edge["PRESENCED_POSTGRES_URL"], "ingest, count and presence write")
	require.Equal(t, "presenced-presenced-postgres/readonlyUrl", edge["PRESENCED_POSTGRES_READONLY_URL"])
	require.NotContains(t, edge, "PRESENCED_WAITINGROOM_VERIFY_KEYS")
	require.NotContains(t, edge, "PRESENCED_PAYMENTS_TICKET_KEY")
	require.Contains(t, core, "PRESENCED_WAITINGROOM_VERIFY_KEYS")
	require.NotContains(t, core, "PRESENCED_WAITINGROOM_SIGNING_KEY")
	require.Contains(t, core, "PRESENCED_PAYMENTS_TICKET_KEY")
}
