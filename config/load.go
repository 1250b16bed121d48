package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// EnvPrefix starts every environment variable that sets a key.
const EnvPrefix = "PRESENCED_"

// Source says where the layers above the defaults come from.
type Source struct {
	// File is a YAML file path; empty means none.
	File string
	// Environ is the process environment ("KEY=value"); nil means none.
	Environ []string
	// Flags are key paths (e.g. "redis.url") set on the command line.
	Flags map[string]string
}

// Load builds the configuration: defaults < file < environment < flags.
func Load(src Source) (Config, error) {
	return load(src, nil)
}

// load is Load, recording in sources (when not nil) which layer set each
// key it set.
func load(src Source, sources map[string]string) (Config, error) {
	cfg := Default()
	fields := fieldIndex(&cfg)
	if src.File != "" {
		if err := loadFile(src.File, fields, sources); err != nil {
			return Config{}, err
		}
	}
	if err := loadEnv(src.Environ, fields, sources); err != nil {
		return Config{}, err
	}
	keys := make([]string, 0, len(src.Flags))
	for k := range src.Flags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		f, ok := fields[key]
		if !ok {
			return Config{}, fmt.Errorf("flag sets unknown key %s", key)
		}
		if err := setScalar(f.value, src.Flags[key]); err != nil {
			return Config{}, fmt.Errorf("flag for %s: %w", key, err)
		}
		if sources != nil {
			sources[key] = "flag"
		}
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// field is one settable leaf of Config.
type field struct {
	key   string // dotted YAML path, e.g. "http.shutdown_timeout"
	env   []string
	value reflect.Value
}

// Keys lists every leaf key of the configuration, sorted.
func Keys() []string {
	cfg := Default()
	idx := fieldIndex(&cfg)
	keys := make([]string, 0, len(idx))
	for k := range idx {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// EnvNames are the environment variables that set a dotted key: its
// EnvName and the documented short form, if any (PRESENCED_JWT_SECRET).
// None for a key that does not exist.
func EnvNames(key string) []string {
	cfg := Default()
	if f, ok := fieldIndex(&cfg)[key]; ok {
		return f.env
	}
	return nil
}

// EnvName is the environment variable for a dotted key.
func EnvName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

func fieldIndex(cfg *Config) map[string]*field {
	out := map[string]*field{}
	var walk func(v reflect.Value, prefix string)
	walk = func(v reflect.Value, prefix string) {
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			name := strings.Split(sf.Tag.Get("yaml"), ",")[0]
			if name == "" || name == "-" {
				continue
			}
			key := name
			if prefix != "" {
				key = prefix + "." + name
			}
			fv := v.Field(i)
			if fv.Kind() == reflect.Struct && fv.Type() != reflect.TypeOf(time.Duration(0)) {
				walk(fv, key)
				continue
			}
			f := &field{key: key, value: fv, env: []string{EnvName(key)}}
			if alias := sf.Tag.Get("env"); alias != "" {
				f.env = append(f.env, alias)
			}
			out[key] = f
		}
	}
	walk(reflect.ValueOf(cfg).Elem(), "")
	return out
}

func loadFile(path string, fields map[string]*field, sources map[string]string) error {
	problems, err := readFile(path, fields, sources)
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		return fmt.Errorf("config file %s: %s", path, strings.Join(problems, "; "))
	}
	return nil
}

// readFile applies the file at path to fields and answers every problem
// of its keys and values, not only the first: a person fixes them in one
// go. err is for a file that cannot be read or is not YAML.
func readFile(path string, fields map[string]*field, sources map[string]string) (problems []string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil, nil // an empty file sets nothing
	}
	var record func(key string)
	if sources != nil {
		record = func(key string) { sources[key] = "file " + path }
	}
	problem := func(err error) { problems = append(problems, err.Error()) }
	applyNode(doc.Content[0], "", fields, record, problem)
	return problems, nil
}

// Check judges the file at path alone, over the defaults: every problem of
// its keys and values, then of the values together (Validate's), one a
// line. cfg is the configuration as far as it could be read, so the caller
// can judge what Config alone cannot (roles).
func Check(path string) (cfg Config, problems []string, err error) {
	cfg = Default()
	problems, err = readFile(path, fieldIndex(&cfg), nil)
	if err != nil {
		return Config{}, nil, err
	}
	return cfg, append(problems, cfg.problems()...), nil
}

func applyNode(n *yaml.Node, prefix string, fields map[string]*field, record func(key string), problem func(error)) {
	if n.Kind != yaml.MappingNode {
		if prefix == "" {
			problem(fmt.Errorf("line %d: the top level must be a mapping", n.Line))
			return
		}
		problem(fmt.Errorf("%s (line %d): expected a mapping", prefix, n.Line))
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := k.Value
		if prefix != "" {
			key = prefix + "." + k.Value
		}
		if f, ok := fields[key]; ok {
			if err := setNode(f, v); err != nil {
				problem(fmt.Errorf("%s (line %d): %w", key, v.Line, err))
				continue
			}
			if record != nil {
				record(key)
			}
			continue
		}
		if hasPrefix(fields, key+".") {
			if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
				continue // an empty section sets nothing
			}
			applyNode(v, key, fields, record, problem)
			continue
		}
		problem(fmt.Errorf("%s (line %d): unknown key", key, k.Line))
	}
}

func hasPrefix(fields map[string]*field, prefix string) bool {
	for k := range fields {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}

func setNode(f *field, n *yaml.Node) error {
	if f.value.Kind() == reflect.Slice {
		switch n.Kind {
		case yaml.SequenceNode:
			var items []string
			for _, c := range n.Content {
				if c.Kind != yaml.ScalarNode {
					return errors.New("expected a list of scalars")
				}
				items = append(items, c.Value)
			}
			f.value.Set(reflect.ValueOf(items))
			return nil
		case yaml.ScalarNode:
			return setScalar(f.value, n.Value)
		}
		return errors.New("expected a list")
	}
	if n.Kind != yaml.ScalarNode {
		return errors.New("expected a single value")
	}
	return setScalar(f.value, n.Value)
}

func loadEnv(environ []string, fields map[string]*field, sources map[string]string) error {
	byName := map[string]*field{}
	for _, f := range fields {
		for _, name := range f.env {
			byName[name] = f
		}
	}
	// Aliases are applied after canonical names so that the documented
	// short forms (PRESENCED_JWT_SECRET) win when both are set.
	for _, pass := range []bool{false, true} {
		for _, kv := range environ {
			name, val, ok := strings.Cut(kv, "=")
			if !ok || !strings.HasPrefix(name, EnvPrefix) {
				continue
			}
			f, known := byName[name]
			if !known || (name != EnvName(f.key)) != pass {
				continue
			}
			if err := setScalar(f.value, val); err != nil {
				return fmt.Errorf("environment %s (%s): %w", name, f.key, err)
			}
			if sources != nil {
				sources[f.key] = "env " + name
			}
		}
	}
	return nil
}

// UnknownEnv lists PRESENCED_* variables that set no key, so a typo can be
// reported instead of silently ignored.
func UnknownEnv(environ []string, ignore ...string) []string {
	cfg := Default()
	known := map[string]bool{}
	for _, f := range fieldIndex(&cfg) {
		for _, n := range f.env {
			known[n] = true
		}
	}
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix) || known[name] {
			continue
		}
		skip := false
		for _, p := range ignore {
			if strings.HasPrefix(name, p) {
				skip = true
			}
		}
		if !skip {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func setScalar(v reflect.Value, s string) error {
	s = strings.TrimSpace(s)
	switch v.Interface().(type) {
	case time.Duration:
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%q is not a duration (e.g. 500ms, 30s, 5m)", s)
		}
		v.SetInt(int64(d))
		return nil
	case []string:
		var items []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				items = append(items, p)
			}
		}
		v.Set(reflect.ValueOf(items))
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("%q is not true or false", s)
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(s, 10, v.Type().Bits())
		if err != nil {
			return fmt.Errorf("%q is not an integer", s)
		}
		v.SetInt(n)
	case reflect.Float64:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", s)
		}
		v.SetFloat(f)
	default:
		return fmt.Errorf("unsupported setting type %s", v.Type())
	}
	return nil
}
