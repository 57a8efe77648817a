package shares

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/model"
)

func TestParseNFSExport(t *testing.T) {
	for _, tc := range []struct{ in, want, says string }{
		{in: "nfs.example.com:/exports/data", want: "nfs.example.com:/exports/data"},
		{in: "NFS.Example.com:/exports//data/", want: "nfs.example.com:/exports/data"},
		{in: "10.0.0.5:/x", want: "10.0.0.5:/x"},
		{in: "[fd00::5]:/x", want: "[fd00::5]:/x"},
		{in: "[FD00:0::5]:/x/../y", want: "[fd00::5]:/y"},
		{in: "filer", says: "no ':'"},
		{in: "filer:relative", says: "absolute"},
		{in: ":/x", says: "not a host name"},
		{in: "fd00::5:/x", says: "must be in brackets"},
		{in: "[fd00::5:/x", says: "no closing ']'"},
		{in: "[10.0.0.5]:/x", says: "not an IPv6 address"},
		{in: "[fd00::5]/x", says: "no ':' after"},
		{in: "filer:/a b", says: "whitespace"},
		{in: "filer:/a,ro", says: "','"},
		{in: "filer:/a\x01", says: "printable ASCII"},
		{in: "filer:/é", says: "printable ASCII"},
		{in: "-oexec:/x", says: "not a host name"},
		{in: "fil_er:/x", says: "not a host name"},
	} {
		got, err := ParseNFSExport(tc.in)
		switch {
		case tc.says == "" && (err != nil || got != tc.want):
			t.Errorf("%q: %q, %v; want %q", tc.in, got, err, tc.want)
		case tc.says != "" && (err == nil || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "export_location")):
			t.Errorf("%q: %v; want an export_location error saying %q", tc.in, err, tc.says)
		case tc.says != "" && !errors.Is(err, model.ErrInvalidSpec):
			t.Errorf("%q: %v is not a request error (400)", tc.in, err)
		}
	}
}

// FuzzParseNFSExport: an accepted export is canonical (parsing it again
// gives itself) and can never be read by mount(8) as an option or carry
// whitespace or a comma.
func FuzzParseNFSExport(f *testing.F) {
	for _, s := range []string{"filer:/x", "[fd00::1]:/a/b", "10.0.0.1:/", "a:b", "-o:/x", "[::ffff:1.2.3.4]:/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ParseNFSExport(in)
		if err != nil {
			return
		}
		again, err := ParseNFSExport(got)
		if err != nil || again != got {
			t.Fatalf("%q -> %q -> %q, %v: not canonical", in, got, again, err)
		}
		if strings.HasPrefix(got, "-") || strings.ContainsAny(got, ", \t\n\r\x00") {
			t.Fatalf("%q accepted as %q", in, got)
		}
	})
}

func TestCheckTag(t *testing.T) {
	const qemu = "a share tag is at most 36 bytes, the size of the tag field of QEMU's virtio-fs device"
	for _, tc := range []struct{ tag, says string }{
		{tag: "data"},
		{tag: "7f3c9a52-1b0e-4a8e-8f7e-5d3c2b1a0f99"},
		{tag: strings.Repeat("a", 36)},
		{tag: strings.Repeat("a", 37), says: "is 37 bytes: " + qemu},
		{tag: strings.Repeat("a", 65), says: "is 65 bytes: " + qemu},
		{tag: strings.Repeat("a", 256), says: "is 256 bytes: " + qemu},
		{tag: "daté", says: "letters, digits and '-'"},
		{tag: "a b", says: "letters, digits and '-'"},
		{tag: "a_b", says: "letters, digits and '-'"},
	} {
		err := CheckTag(tc.tag)
		if (tc.says == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%q: %v, want %q", tc.tag, err, tc.says)
		}
	}
}

// TestShareTagOneRule: the instance spec (schema and rules) and an attach
// request refuse the same share tags with the same rule and reason, and
// accept the same ones (issue 20, item 19: the schema said 255, the code
// 64, the API 36).
func TestShareTagOneRule(t *testing.T) {
	for _, tag := range []string{"data", strings.Repeat("a", 36), strings.Repeat("a", 37), strings.Repeat("b", 64), strings.Repeat("c", 255), "a_b", "daté"} {
		apiErr := CheckTag(tag)
		_, specErr := model.ParseSpec([]byte(fmt.Sprintf("name: a\nshares: [{share_id: 7f3c9a52-1b0e-4a8e-8f7e-5d3c2b1a0f99, tag: %q}]\n", tag)))
		if (apiErr == nil) != (specErr == nil) {
			t.Errorf("%q: the API says %v, the spec %v", tag, apiErr, specErr)
			continue
		}
		if apiErr == nil {
			continue
		}
		var a, s *model.SpecError
		if !errors.As(apiErr, &a) || !errors.As(specErr, &s) || len(a.Errors) != 1 || len(s.Errors) != 1 {
			t.Fatalf("%q: %v / %v", tag, apiErr, specErr)
		}
		if a.Errors[0].Rule != s.Errors[0].Rule || s.Errors[0].Field != "shares[0].tag" {
			t.Errorf("%q: the API's rule %q, the spec's %s: %q", tag, a.Errors[0].Rule, s.Errors[0].Field, s.Errors[0].Rule)
		}
	}
}

func TestMountPoints(t *testing.T) {
	in := "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n" +
		`36 22 0:32 / /var/lib/vmeta/shares/.nfs/a\040b rw - nfs4 filer:/x rw` + "\n" +
		"short line\n"
	got, err := mountPoints(strings.NewReader(in))
	if err != nil || len(got) != 2 || got[1] != "/var/lib/vmeta/shares/.nfs/a b" {
		t.Errorf("mountPoints = %q, %v", got, err)
	}
}

// FuzzMountPoints: any mount table parses without panicking or failing
// (only a line over 1 MiB is an error).
func FuzzMountPoints(f *testing.F) {
	f.Add("36 22 0:32 / /a\\040b rw - nfs4 filer:/x rw\n")
	f.Add("1 2 3 4 \\\\134\n")
	f.Fuzz(func(t *testing.T, in string) {
		if _, err := mountPoints(strings.NewReader(in)); err != nil && !strings.Contains(err.Error(), "too long") {
			t.Fatal(err)
		}
	})
}
