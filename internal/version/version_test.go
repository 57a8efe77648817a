package version

import (
	"runtime/debug"
	"testing"
)

func TestDevelVersion(t *testing.T) {
	tests := []struct {
		name     string
		settings []debug.BuildSetting
		want     string
	}{
		{"no vcs", nil, "devel"},
		{"clean", []debug.BuildSetting{{Key: "vcs.revision", Value: "57aaa02c0ffee"}, {Key: "vcs.modified", Value: "false"}}, "devel+57aaa02"},
		{"dirty", []debug.BuildSetting{{Key: "vcs.revision", Value: "57aaa02c0ffee"}, {Key: "vcs.modified", Value: "true"}}, "devel+57aaa02-dirty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := develVersion(tt.settings); got != tt.want {
				t.Errorf("develVersion = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestStringPrefersLinkerValue(t *testing.T) {
	old := Version
	t.Cleanup(func() { Version = old })
	Version = "v1.2.3-4-gabcdef0"
	if got := String(); got != Version {
		t.Errorf("String() = %q, want %q", got, Version)
	}
}
