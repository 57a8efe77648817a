package udev_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/vmeta/vmeta/guest/udev"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func TestEncodeTag(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"oracledb", "oracledb"},
		{"db/primary logs", `db\x2fprimary\x20logs`},
		{`a"b\c`, `a\x22b\x5cc`},
		{"$env{X}%n*?[|]", `\x24env\x7bX\x7d\x25n\x2a\x3f\x5b\x7c\x5d`},
		{"#+-.:=@_", "#+-.:=@_"},
		{"données", "données"}, // valid UTF-8 stays, as in /dev/disk/by-label
		{"a\xffb", `a\xffb`},   // invalid UTF-8 does not
		{"tab\there\n", `tab\x09here\x0a`},
		{".", `\x2e`},
		{"..", `\x2e\x2e`},
		{"...", "..."},
		{`\x20`, `\x5cx20`}, // a literal escape is itself escaped
	} {
		got := udev.EncodeTag(c.in)
		if got != c.want {
			t.Errorf("EncodeTag(%q) = %q, want %q", c.in, got, c.want)
		}
		if back, err := udev.DecodeTag(got); err != nil || back != c.in {
			t.Errorf("DecodeTag(%q) = %q, %v; want %q", got, back, err, c.in)
		}
	}
}

func TestAltName(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"nfvfunc1", "nfvfunc1"},
		{"db:net", `db\x3anet`},
		{"a b/c", `a\x20b\x2fc`},
		{"é", `\xc3\xa9`},
		{"..", `\x2e\x2e`},
	} {
		got, err := udev.AltName(c.in)
		if err != nil || got != c.want {
			t.Errorf("AltName(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if _, err := udev.AltName(strings.Repeat("/", 40)); err == nil {
		t.Error("a 160-byte altname was accepted")
	}
}

func TestDecodeTagBad(t *testing.T) {
	for _, s := range []string{`\`, `\x`, `\x2`, `\y20`, `\xzz`} {
		if _, err := udev.DecodeTag(s); err == nil {
			t.Errorf("DecodeTag(%q) accepted", s)
		}
	}
	if got := udev.SplitTags(`a db\x2fx \bad`); strings.Join(got, "|") != `a|db/x|\bad` {
		t.Errorf("SplitTags: %q", got)
	}
}

// FuzzEncodeTag: the encoding is reversible, keeps to udev's characters
// (and valid UTF-8), never names a directory, and altnames never carry
// what the kernel refuses.
func FuzzEncodeTag(f *testing.F) {
	for _, s := range []string{"oracledb", "db/primary logs", `a"b\c`, ".", "..", "données", "a\xffb", "", `\x2f`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tag string) {
		enc := udev.EncodeTag(tag)
		back, err := udev.DecodeTag(enc)
		if err != nil || back != tag {
			t.Fatalf("DecodeTag(EncodeTag(%q)) = %q, %v", tag, back, err)
		}
		if !utf8.ValidString(enc) {
			t.Fatalf("EncodeTag(%q) = %q is not valid UTF-8", tag, enc)
		}
		if enc == "." || enc == ".." {
			t.Fatalf("EncodeTag(%q) = %q names a directory", tag, enc)
		}
		for _, r := range enc {
			if r < 0x80 && !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || strings.ContainsRune(`#+-.:=@_\`, r)) {
				t.Fatalf("EncodeTag(%q) = %q has %q", tag, enc, r)
			}
		}
		if an, err := udev.AltName(tag); err == nil {
			if strings.ContainsAny(an, ": /\t\n") || an == "" && tag != "" || len(an) > udev.MaxAltName {
				t.Fatalf("AltName(%q) = %q", tag, an)
			}
			for i := 0; i < len(an); i++ {
				if an[i] >= 0x80 {
					t.Fatalf("AltName(%q) = %q has a non-ASCII byte", tag, an)
				}
			}
			if back, err := udev.DecodeTag(an); err != nil || back != tag {
				t.Fatalf("DecodeTag(AltName(%q)) = %q, %v", tag, back, err)
			}
		}
	})
}

func TestRender(t *testing.T) {
	r := udev.Rules{
		Disks: []udev.Disk{
			{DevPath: "/devices/pci0000:00/0000:00:07.0/virtio2/block/vda", Tags: []string{"squidcache"}, Links: []string{"squidcache"}},
			{DevPath: "/devices/pci0000:00/0000:00:05.0/virtio1/host0/target0:0:2/0:0:2:0/block/sda", Tags: []string{"oracledb", "db/primary logs"}, Links: []string{"oracledb", "db/primary logs"}, Encrypted: true},
			{DevPath: "/devices/pci0000:00/0000:00:08.0/virtio3/block/vdb", Encrypted: true},
			{DevPath: "/devices/pci0000:00/0000:00:09.0/virtio4/block/vdc"},
		},
		NICs: []udev.NIC{
			{MAC: "52:54:00:12:34:56", PCI: "0000:00:03.0", Tags: []string{"nfvfunc1"}},
			{MAC: "52:54:00:12:34:57", Tags: []string{`we"ird $tag`}},
		},
	}
	got, err := r.Render()
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "rules.golden")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("rules differ from %s (go test -update to rewrite):\n%s", golden, got)
	}
	// Order of the input does not matter.
	r.Disks[0], r.Disks[1] = r.Disks[1], r.Disks[0]
	again, _ := r.Render()
	if !bytes.Equal(again, got) {
		t.Error("Render depends on the order of the disks")
	}
	// A DEVPATH with glob characters cannot be matched exactly.
	bad := udev.Rules{Disks: []udev.Disk{{DevPath: "/devices/x/block/sd*", Tags: []string{"x"}}}}
	if _, err := bad.Render(); err == nil {
		t.Error("a DEVPATH with * was rendered")
	}
}

func TestParseEntry(t *testing.T) {
	e := udev.ParseEntry([]byte("S:disk/by-id/virtio-x\nS:disk/by-tag/oracledb\nW:1\nI:123\nE:ID_SERIAL=x\nE:VMETA_TAGS=oracledb db\\x2fprimary\nE:EMPTY=\nG:systemd\nQ:systemd\nV:1\n"))
	if e.Props["VMETA_TAGS"] != `oracledb db\x2fprimary` || e.Props["ID_SERIAL"] != "x" || !e.HasLink("disk/by-tag/oracledb") || len(e.Links) != 2 {
		t.Errorf("%+v", e)
	}
	if _, ok := e.Props["EMPTY"]; !ok {
		t.Error("empty property lost")
	}
}

// FuzzParseEntry: any database file parses without panicking, and every
// property line that has a key comes back.
func FuzzParseEntry(f *testing.F) {
	f.Add([]byte("S:disk/by-tag/a\nE:VMETA_TAGS=a b\n"))
	f.Add([]byte("E:\nS:\n:\nE"))
	f.Fuzz(func(t *testing.T, b []byte) {
		e := udev.ParseEntry(b)
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(strings.TrimPrefix(l, "E:"), "="); ok && strings.HasPrefix(l, "E:") && !strings.Contains(string(b), "\r") {
				if got, ok := e.Props[k]; !ok || (got != v && !strings.Contains(string(b), "E:"+k+"=")) {
					t.Fatalf("property %q lost: %+v", k, e.Props)
				}
			}
		}
	})
}

func TestDB(t *testing.T) {
	dir := t.TempDir()
	db := udev.DB{RunDir: dir}
	if db.Running() {
		t.Error("running without a control socket")
	}
	os.MkdirAll(filepath.Join(dir, "data"), 0o755)
	os.WriteFile(filepath.Join(dir, "data", "b252:0"), []byte("E:VMETA_TAGS=x\n"), 0o644)
	if e, err := db.Entry(udev.BlockID("252", "0")); err != nil || e.Props["VMETA_TAGS"] != "x" {
		t.Errorf("%+v %v", e, err)
	}
	if e, err := db.Entry(udev.NetID(7)); err != nil || len(e.Props) != 0 {
		t.Errorf("missing entry: %+v %v", e, err)
	}
}
