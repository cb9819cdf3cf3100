// Package config loads each binary's configuration from flags and MIGHTYETL_*
// environment variables, applies documented defaults, validates every value
// and records where each came from (configuration provenance).
//
// Precedence: an explicitly set flag, then the environment variable, then
// (for `etlctl dev` only) a value the all-in-one process chose, then the
// default, which for a few settings is derived from others (the lease
// renewal interval and safety margin from the lease duration). A bad value is
// reported as one line naming the setting and the allowed range; binaries
// print it and exit with status 2.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Source says where a setting's effective value came from.
type Source string

// Sources of a setting.
const (
	SourceDefault Source = "default"
	SourceEnv     Source = "env"
	SourceFlag    Source = "flag"
	// SourceDerived marks a default computed from other settings because
	// neither the flag nor the variable was set (see Loader.DerivedDuration).
	SourceDerived Source = "derived"
	// SourceDev marks a value `etlctl dev` chose for its all-in-one
	// process (basic auth, its generated key, its shorter shutdown grace)
	// because neither the flag nor the variable was set (see
	// Loader.DevDefaults).
	SourceDev Source = "dev"
)

// Setting is one effective setting, for provenance logs and the info metric.
// Secret settings show "(set)" or "(unset)" instead of their value.
type Setting struct {
	Name   string // environment variable name
	Value  string
	Source Source
}

type entry struct {
	env, flag string
	secret    bool
	raw       *string // flag value holder
	apply     func(string) error
	def       string
	derive    func() string // computes the default at Parse time; nil: def
	source    Source
	value     string
}

// Loader collects settings, then parses them in one pass.
type Loader struct {
	fs      *flag.FlagSet
	args    []string
	getenv  func(string) string
	entries []*entry
	dev     map[string]string // DevDefaults
}

// NewLoader returns a loader for a binary named name reading args (without
// the program name) and the environment through getenv.
func NewLoader(name string, args []string, getenv func(string) string) *Loader {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return &Loader{fs: fs, args: args, getenv: getenv}
}

func (l *Loader) add(env, flagName, def, usage string, secret bool, apply func(string) error) {
	e := &entry{env: env, flag: flagName, secret: secret, apply: apply, def: def}
	e.raw = l.fs.String(flagName, def, usage+" (env "+env+")")
	l.entries = append(l.entries, e)
}

// DevDefaults sets values chosen by `etlctl dev`, by variable name: a
// setting whose flag and variable (and for a secret its _FILE variable) are
// unset takes its value from chosen instead of its documented or derived
// default, validated like any value and reported as SourceDev. Names no
// setting registers are ignored; nil means none. Call before Parse.
func (l *Loader) DevDefaults(chosen map[string]string) { l.dev = chosen }

// String registers a string setting; validate (may be nil) checks the value.
func (l *Loader) String(dst *string, env, flagName, def, usage string, validate func(string) error) {
	l.add(env, flagName, def, usage, false, func(s string) error {
		if validate != nil {
			if err := validate(s); err != nil {
				return err
			}
		}
		*dst = s
		return nil
	})
}

// Secret registers a string setting whose value never appears in provenance.
// Unless the flag is set, the value may also come from the file named by
// the variable env+"_FILE" (trailing whitespace trimmed; source "env"), the
// way container secrets are mounted; setting both variables is an error.
func (l *Loader) Secret(dst *string, env, flagName, usage string, validate func(string) error) {
	l.add(env, flagName, "", usage, true, func(s string) error {
		if validate != nil {
			if err := validate(s); err != nil {
				return err
			}
		}
		*dst = s
		return nil
	})
}

// Duration registers a duration in Go syntax ("200ms", "30s") within [lo, hi].
func (l *Loader) Duration(dst *time.Duration, env, flagName string, def, lo, hi time.Duration, usage string) {
	l.add(env, flagName, def.String(), usage, false, func(s string) error {
		d, err := time.ParseDuration(s)
		if err != nil || d < lo || d > hi {
			return fmt.Errorf("must be a duration between %s and %s (like 200ms or 30s)", lo, hi)
		}
		*dst = d
		return nil
	})
}

// DerivedDuration registers a duration within [lo, hi] whose default is
// derive's result, computed during Parse after every setting registered
// before this one has been applied (so derive may read their destinations).
// A value derived this way is validated like a set one and reported with
// SourceDerived.
func (l *Loader) DerivedDuration(dst *time.Duration, env, flagName string, derive func() time.Duration, lo, hi time.Duration, usage string) {
	l.Duration(dst, env, flagName, 0, lo, hi, usage)
	e := l.entries[len(l.entries)-1]
	e.def = ""
	e.derive = func() string { return derive().String() }
	l.fs.Lookup(flagName).DefValue = ""
}

// DerivedInt registers an integer within [lo, hi] whose default is
// derive's result, computed during Parse after every setting registered
// before this one has been applied (as DerivedDuration).
func (l *Loader) DerivedInt(dst *int, env, flagName string, derive func() int, lo, hi int, usage string) {
	l.Int(dst, env, flagName, 0, lo, hi, usage)
	e := l.entries[len(l.entries)-1]
	e.def = ""
	e.derive = func() string { return strconv.Itoa(derive()) }
	l.fs.Lookup(flagName).DefValue = ""
}

// Int registers an integer within [lo, hi].
func (l *Loader) Int(dst *int, env, flagName string, def, lo, hi int, usage string) {
	l.add(env, flagName, strconv.Itoa(def), usage, false, func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("must be an integer between %d and %d", lo, hi)
		}
		*dst = n
		return nil
	})
}

// Bool registers a boolean ("true" or "false").
func (l *Loader) Bool(dst *bool, env, flagName string, def bool, usage string) {
	l.add(env, flagName, strconv.FormatBool(def), usage, false, func(s string) error {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return errors.New("must be true or false")
		}
		*dst = b
		return nil
	})
}

// Parse reads flags and environment and applies every setting. It returns the
// first problem as one line naming the setting (flag.ErrHelp for -h).
func (l *Loader) Parse() error {
	if err := l.fs.Parse(l.args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("invalid command line: %v", err)
	}
	if l.fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", l.fs.Arg(0))
	}
	set := map[string]bool{}
	l.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, e := range l.entries {
		v, src := e.def, SourceDefault
		if set[e.flag] {
			v, src = *e.raw, SourceFlag
		} else if ev, ok, err := l.lookupEnv(e); err != nil {
			return err
		} else if ok {
			v, src = ev, SourceEnv
		} else if dv, ok := l.dev[e.env]; ok {
			v, src = dv, SourceDev
		} else if e.derive != nil {
			v, src = e.derive(), SourceDerived
		}
		if err := e.apply(strings.TrimSpace(v)); err != nil {
			name := e.env
			if src == SourceFlag {
				name = "-" + e.flag
			}
			return fmt.Errorf("%s: %v", name, err)
		}
		e.value, e.source = v, src
	}
	return nil
}

func (l *Loader) lookup(env string) (string, bool) {
	v := l.getenv(env)
	return v, v != ""
}

// lookupEnv reads e's variable, or for a secret the file its _FILE
// variable names. The error never holds the file's content.
func (l *Loader) lookupEnv(e *entry) (string, bool, error) {
	v, ok := l.lookup(e.env)
	if !e.secret {
		return v, ok, nil
	}
	path, fromFile := l.lookup(e.env + "_FILE")
	switch {
	case ok && fromFile:
		return "", false, fmt.Errorf("%s: set either it or %s_FILE, not both", e.env, e.env)
	case !fromFile:
		return v, ok, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", false, fmt.Errorf("%s_FILE: %w", e.env, err)
	}
	v = strings.TrimRight(string(b), " \t\r\n")
	if v == "" {
		return "", false, fmt.Errorf("%s_FILE: %s is empty", e.env, path)
	}
	return v, true, nil
}

// source reports where the setting named env came from after Parse ("" for
// an unknown name).
func (l *Loader) source(env string) Source {
	for _, e := range l.entries {
		if e.env == env {
			return e.source
		}
	}
	return ""
}

// Usage writes the flag list to w.
func (l *Loader) Usage(w io.Writer) {
	l.fs.SetOutput(w)
	l.fs.PrintDefaults()
	l.fs.SetOutput(io.Discard)
}

// Provenance lists every effective setting, sorted by name, secrets redacted.
func (l *Loader) Provenance() []Setting {
	out := make([]Setting, 0, len(l.entries))
	for _, e := range l.entries {
		v := e.value
		if e.secret {
			v = "(unset)"
			if e.value != "" {
				v = "(set)"
			}
		}
		v = redactedValue(e.env, v)
		out = append(out, Setting{Name: e.env, Value: v, Source: e.source})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
