package pkgbuild

import (
	"debug/buildinfo"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// License is the license text of one component linked into a binary.
type License struct {
	// Component is a module path and version, "Go standard library", or
	// the main module.
	Component string
	// File is the license file's name (LICENSE, COPYING, NOTICE).
	File string
	Text string
}

// Kind names a license Debian ships in /usr/share/common-licenses
// ("GPL-3", "Apache-2.0"), whose full text a copyright file must not
// repeat; empty for the others (MIT, BSD, ...), quoted in full.
func (l License) Kind() string {
	t := l.Text
	switch {
	case strings.Contains(t, "GNU GENERAL PUBLIC LICENSE") && strings.Contains(t, "Version 3, 29 June 2007"):
		return "GPL-3"
	case strings.Contains(t, "Apache License") && strings.Contains(t, "Version 2.0, January 2004") && strings.Contains(t, "TERMS AND CONDITIONS"):
		return "Apache-2.0"
	}
	return ""
}

// Licenses returns the license files of everything the Go binary at bin
// links: the Go standard library, the main module (root) and every
// dependency module, from the module cache.
func Licenses(bin, root, modCache, goRoot string) ([]License, error) {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("licenses of %s: %w", bin, err)
	}
	var out []License
	add := func(component, dir string) error {
		ls, err := licenseFiles(component, dir)
		if err != nil {
			return err
		}
		if len(ls) == 0 {
			return fmt.Errorf("licenses of %s: %s has no LICENSE, COPYING or NOTICE file in %s", bin, component, dir)
		}
		out = append(out, ls...)
		return nil
	}
	if err := add("Go standard library ("+bi.GoVersion+")", goRoot); err != nil {
		return nil, err
	}
	if err := add(bi.Main.Path, root); err != nil {
		return nil, err
	}
	for _, m := range bi.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		dir, err := moduleDir(modCache, m.Path, m.Version)
		if err != nil {
			return nil, err
		}
		if err := add(m.Path+" "+m.Version, dir); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func licenseFiles(component, dir string) ([]License, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("license of %s: %w", component, err)
	}
	var names []string
	for _, e := range ents {
		n := strings.ToUpper(e.Name())
		if e.Type().IsRegular() && (strings.HasPrefix(n, "LICENSE") || strings.HasPrefix(n, "LICENCE") || strings.HasPrefix(n, "COPYING") || strings.HasPrefix(n, "NOTICE")) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var out []License
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return nil, fmt.Errorf("license of %s: %w", component, err)
		}
		out = append(out, License{Component: component, File: n, Text: string(b)})
	}
	return out, nil
}

// moduleDir is where the module cache keeps path@version: upper-case
// letters are escaped as '!' and the lower-case letter.
func moduleDir(modCache, path, version string) (string, error) {
	esc := func(s string) string {
		var b strings.Builder
		for _, r := range s {
			if 'A' <= r && r <= 'Z' {
				b.WriteByte('!')
				r += 'a' - 'A'
			}
			b.WriteRune(r)
		}
		return b.String()
	}
	if path == "" || version == "" {
		return "", fmt.Errorf("module %q %q: no path or version in the build info", path, version)
	}
	return filepath.Join(modCache, esc(path)+"@"+esc(version)), nil
}

// debCopyright is the Debian copyright file of a package whose binaries
// link ls: the package's own license statement, then each component with
// its text, or a reference to /usr/share/common-licenses for the texts
// Debian ships there.
func debCopyright(header string, ls []License) string {
	var b strings.Builder
	b.WriteString(header)
	b.WriteString("\nThe binaries statically link the components below. Their license texts\nfollow; the GNU GPL version 3 and the Apache License 2.0 are in\n/usr/share/common-licenses/GPL-3 and /usr/share/common-licenses/Apache-2.0.\n")
	for _, l := range ls {
		fmt.Fprintf(&b, "\n--------------------------------------------------------------------\n%s (%s)\n\n", l.Component, l.File)
		if k := l.Kind(); k != "" {
			fmt.Fprintf(&b, "Licensed under the %s license: see /usr/share/common-licenses/%s\n", k, k)
			continue
		}
		b.WriteString(strings.TrimRight(l.Text, "\n "))
		b.WriteString("\n")
	}
	return b.String()
}

// rpmLicenseFiles writes each license text as its own file under dir
// (for %license, /usr/share/licenses/NAME/): components/<n>-<file>.
func rpmLicenseFiles(dir string, ls []License) ([]string, error) {
	var out []string
	for i, l := range ls {
		name := fmt.Sprintf("%02d-%s-%s", i, sanitize(l.Component), l.File)
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(l.Component+"\n\n"+l.Text), 0o644); err != nil {
			return nil, err
		}
		out = append(out, name)
	}
	return out, nil
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, s)
}
