package shares

import (
	"os"
	"strings"
	"testing"
)

func TestParseCephFSExport(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "10.0.0.1:/volumes/a", want: "10.0.0.1:/volumes/a"},
		{in: "10.0.0.1:6789,10.0.0.2:6789:/volumes/_nogroup/x/", want: "10.0.0.1:6789,10.0.0.2:6789:/volumes/_nogroup/x"},
		{in: "MON.example.org:/a,fs=cephfs2", want: "mon.example.org:/a,fs=cephfs2"},
		{in: "[2001:db8::1]:3300:/a", want: "[2001:db8::1]:3300:/a"},
		{in: ":/a", err: "no monitor"},
		{in: "10.0.0.1", err: "no ':/'"},
		{in: "10.0.0.1:a/b", err: "no ':/'"},
		{in: "10.0.0.1:/a/../b", err: "'..'"},
		{in: "10.0.0.1:/..", err: "'..'"},
		{in: "10.0.0.1,:/a", err: `monitor "": empty`},
		{in: "10.0.0.1:99999:/a", err: "must be 1 to 65535"},
		{in: "bad_host:/a", err: "not a host name"},
		{in: "2001:db8::1:/a", err: "must be in brackets"},
		{in: "10.0.0.1:/a b", err: "whitespace"},
		{in: "10.0.0.1:/a,ro", err: "only fs=NAME"},
		{in: "10.0.0.1:/a,fs=bad/name", err: "only fs=NAME"},
	} {
		got, err := ParseCephFSExport(tc.in)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "export_location") {
				t.Errorf("%q: error %v, want one naming export_location and %q", tc.in, err, tc.err)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case got.String() != tc.want:
			t.Errorf("%q: %q, want %q", tc.in, got.String(), tc.want)
		}
	}
}

func FuzzParseCephFSExport(f *testing.F) {
	for _, s := range []string{"10.0.0.1:/a", "a,b:/c,fs=x", "[::1]:1:/x", ":/", "x:/../y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := ParseCephFSExport(s)
		if err != nil {
			return
		}
		// Canonical forms parse to themselves, and never carry "..".
		again, err := ParseCephFSExport(e.String())
		if err != nil || again.String() != e.String() {
			t.Fatalf("%q -> %q -> %q, %v", s, e.String(), again.String(), err)
		}
		if strings.Contains(e.Path, "..") && strings.Contains("/"+e.Path+"/", "/../") {
			t.Fatalf("%q: path %q", s, e.Path)
		}
	})
}

func TestParseKeyring(t *testing.T) {
	const key = "AQBmyFdnAAAAABAAgZqR2bH1ZxZtW2tQ2vY1wQ=="
	for _, tc := range []struct {
		in, name, err string
	}{
		{in: "[mon.]\n\tkey = " + key + "\n\tcaps mon = \"allow *\"\n[client.admin]\n\tkey = " + key + "\n", name: "client.admin"},
		{in: "[client.x]\nkey=" + key, name: "client.x"},
		{in: "[mon.]\n\tkey = " + key + "\n", err: "no client entity"},
		{in: "", err: "no [client.NAME]"},
		{in: "[client.admin]\n\tcaps mon = x\n", err: "has no key"},
		{in: "[client.admin]\n\tkey = not base64!\n", err: "not base64"},
	} {
		name, k, err := ParseKeyring([]byte(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), key) || strings.Contains(err.Error(), "not base64!") {
				t.Errorf("%q: %v, want %q without the key", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || name != tc.name || string(k) != key {
			t.Errorf("%q: %s %q %v", tc.in, name, k, err)
		}
	}
}

func TestCephCaps(t *testing.T) {
	got := caps(map[string]cephPath{"b": {FS: "fs2", Path: "/b"}, "a": {Path: "/a"}, "c": {FS: "fs2", Path: "/c"}})
	want := CephCaps{Mon: "allow r", MDS: "allow rw path=/a, allow rw fsname=fs2 path=/b, allow rw fsname=fs2 path=/c",
		OSD: "allow rw tag cephfs data=*, allow rw tag cephfs data=fs2"}
	if got != want {
		t.Errorf("caps\n got %+v\nwant %+v", got, want)
	}
	if got := caps(nil); got != (CephCaps{Mon: "allow r"}) {
		t.Errorf("no grants: %+v", got)
	}
}

func TestCephErrorHidesCaps(t *testing.T) {
	err := &CephError{Args: []string{"auth", "caps", "client.vmeta-h.1", "mon", "allow r", "mds", "allow rw path=/secret/path"}, Err: os.ErrInvalid, Stderr: "EINVAL"}
	if s := err.Error(); strings.Contains(s, "/secret/path") || !strings.Contains(s, "client.vmeta-h.1") {
		t.Errorf("%q: want the client, not the paths", s)
	}
}
