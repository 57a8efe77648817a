// Package version is the version of vmeta's binaries (hostctl,
// vmeta-metadata, vmeta-agent): `git describe` of the commit they were
// built from, set by the linker (`make build`, `make agent` and
// `make package` pass -ldflags "-X github.com/vmeta/vmeta/internal/version.Version=...").
// It imports only the standard library, so the guest agent may use it.
package version

import "runtime/debug"

// Version is set at link time; empty in a plain `go build`.
var Version string

// String returns Version, or for a build without it "devel" followed by
// the VCS revision Go stamped into the binary, when there is one
// ("devel+57aaa02", "devel+57aaa02-dirty").
func String() string {
	if Version != "" {
		return Version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return develVersion(info.Settings)
}

func develVersion(settings []debug.BuildSetting) string {
	var rev, modified string
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 7 {
		rev = rev[:7]
	}
	v := "devel+" + rev
	if modified == "true" {
		v += "-dirty"
	}
	return v
}
