package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"time"

	"sigs.k8s.io/yaml"
)

// configFlag is the flag naming a command's configuration file.
const configFlag = "config"

// LoadConfigFile sets the flags of fs from a YAML file of one key per
// flag, named as the flag (`data-dir: /srv/vmeta`). Flags already set on
// the command line keep their values: the command line overrides the
// file. An unknown key is an error naming the key and the file; a value
// of the wrong type names the key and the value. A repeatable flag takes
// a list.
func LoadConfigFile(fs *flag.FlagSet, path string) error {
	return loadConfigFile(context.Background(), fs, path)
}

func loadConfigFile(ctx context.Context, fs *flag.FlagSet, path string) error {
	b, err := readFile(ctx, nil, "config file", path, maxConfigFile)
	if err != nil {
		return err
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	var keys map[string]any
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	if err := dec.Decode(&keys); err != nil {
		return fmt.Errorf("config file %s: must be a map of flag names to values: %w", path, err)
	}
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	var errs []error
	for _, key := range slices.Sorted(maps.Keys(keys)) {
		f := fs.Lookup(key)
		if f == nil || key == configFlag {
			errs = append(errs, fmt.Errorf("config file %s: unknown key %q (the keys are the flags of `%s --help`)", path, key, fs.Name()))
			continue
		}
		if onCommandLine[key] {
			continue
		}
		vals, err := flagValues(f, keys[key])
		if err == nil {
			for _, v := range vals {
				if err = fs.Set(key, v); err != nil {
					break
				}
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("config file %s: %s: %s: %w", path, key, show(keys[key]), err))
		}
	}
	return errors.Join(errs...)
}

// flagValues turns a file's value into the strings to Set on f, checking
// its type against the flag's.
func flagValues(f *flag.Flag, v any) ([]string, error) {
	getter, ok := f.Value.(flag.Getter)
	if !ok {
		// A repeatable flag (flag.Func): a string or a list of strings.
		switch v := v.(type) {
		case string:
			return []string{v}, nil
		case []any:
			out := make([]string, len(v))
			for i, e := range v {
				s, ok := e.(string)
				if !ok {
					return nil, errors.New("must be a list of strings")
				}
				out[i] = s
			}
			return out, nil
		}
		return nil, errors.New("must be a string or a list of strings")
	}
	switch getter.Get().(type) {
	case bool:
		if b, ok := v.(bool); ok {
			return []string{fmt.Sprint(b)}, nil
		}
		return nil, errors.New("must be true or false")
	case int, int64, uint, uint64:
		if n, ok := v.(json.Number); ok {
			if _, err := n.Int64(); err == nil {
				return []string{n.String()}, nil
			}
		}
		return nil, errors.New("must be an integer")
	case float64:
		if n, ok := v.(json.Number); ok {
			return []string{n.String()}, nil
		}
		return nil, errors.New("must be a number")
	case time.Duration:
		if s, ok := v.(string); ok {
			if _, err := time.ParseDuration(s); err == nil {
				return []string{s}, nil
			}
		}
		return nil, errors.New("must be a duration such as 10s or 1m30s")
	default:
		if s, ok := v.(string); ok {
			return []string{s}, nil
		}
		return nil, errors.New("must be a string (quote it)")
	}
}

// show quotes a file's value for an error message, cut to a readable
// length.
func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	const limit = 80
	if s := string(b); len(s) > limit {
		return fmt.Sprintf("%s… (%d bytes)", s[:limit], len(s))
	}
	return string(b)
}
