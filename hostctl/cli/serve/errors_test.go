package serve

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRefusalHeadingNamesResource: a request refused with a list of
// fields is headed by what was refused — the instance spec, the flavor,
// the image, the share, the device, the request — not "invalid instance
// spec" whatever it was (issue 20, item 20); the fields follow, one a
// line.
func TestRefusalHeadingNamesResource(t *testing.T) {
	dir := t.TempDir()
	d := serveDevices(t, dir)
	spec := filepath.Join(dir, "web.yaml")
	if err := os.WriteFile(spec, []byte("name: web-1\nproject_id: demo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := d.hostctl("instance", "apply", "-f", spec); code != 0 {
		t.Fatalf("apply: %d %s", code, out)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: web-2\nnics: [{mac: \"52:54:00:aa:bb\"}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "img.raw")
	if err := os.WriteFile(img, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args    []string
		heading string // the first line holds it
		field   string // a field the next lines name
	}{
		{[]string{"instance", "apply", "-f", bad}, "invalid instance spec:", "nics[0].mac"},
		{[]string{"flavor", "create", "f1", "--vcpus", "5000", "--ram", "512", "--disk", "1"}, "invalid flavor:", "vcpus"},
		{[]string{"image", "import", img, "--name", "bad/name"}, "invalid image:", "name"},
		{[]string{"share", "create", "--proto", "local", "--export", "/etc", "--project", "p q"}, "invalid share:", "project_id"},
		{[]string{"share", "attach", "web-1", "not-a-uuid"}, "invalid share:", "share.share_id"},
		{[]string{"device", "show", "zzz"}, "invalid device:", "address"},
		{[]string{"instance", "rescue", "web-1", "--image", "bad/name"}, "invalid rescue request:", "image"},
	} {
		code, out := d.hostctl(tc.args...)
		first, rest, _ := strings.Cut(out, "\n")
		if code != 1 || !strings.HasPrefix(first, "hostctl: ") || !strings.HasSuffix(first, tc.heading) || !strings.Contains(rest, "  "+tc.field) {
			t.Errorf("hostctl %s: exit %d, want 1, a first line ending in %q and the field %s:\n%s", strings.Join(tc.args, " "), code, tc.heading, tc.field, out)
		}
	}
}
