package configdrive_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/fat32"

	"github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/testenv"
)

// edgeFiles adds files that exercise the corners of both formats to the
// realistic sample: an empty file, exact block multiples, a multi-block
// blob, long names (Rock Ridge continuation area, several FAT long-name
// slots; the longest name an ISO drive accepts) and a deeper directory.
func edgeFiles() []metadata.File {
	rng := rand.New(rand.NewPCG(3, 4))
	blob := make([]byte, 70000)
	for i := range blob {
		blob[i] = byte(rng.UintN(256))
	}
	long := strings.Repeat("a-long-file-name.", 12) + "json" // 208 bytes
	files := append(configdrive.SampleFiles(),
		metadata.File{Path: "openstack/content/0001", Data: []byte{}},
		metadata.File{Path: "openstack/content/0002", Data: blob},
		metadata.File{Path: "openstack/content/0003", Data: bytes.Repeat([]byte("x"), 2048)},
		metadata.File{Path: "openstack/content/0004", Data: bytes.Repeat([]byte("y"), 512)},
		metadata.File{Path: "openstack/content/" + long, Data: []byte("long name")},
		metadata.File{Path: "openstack/content/" + strings.Repeat("L", 250), Data: []byte("longest name")},
		metadata.File{Path: "deep/a/b/c/d/e/f/g", Data: []byte("seven directories down")},
	)
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files
}

func treeOf(files []metadata.File) map[string][]byte {
	m := make(map[string][]byte, len(files))
	for _, f := range files {
		m[f.Path] = f.Data
	}
	return m
}

// sameTree fails the test unless got holds exactly the files of want.
// readDrive reads the drive at p (what is named for messages) and checks
// its label is config-2 and it holds files, exactly; it returns the tree.
func readDrive(t *testing.T, what, p string, files []metadata.File) *metadata.Tree {
	t.Helper()
	tree, label, err := configdrive.Read(p)
	if err != nil {
		t.Fatalf("%s: Read: %v", what, err)
	}
	if label != "config-2" {
		t.Errorf("%s: label %q, want config-2", what, label)
	}
	sameTree(t, tree.Files, files)
	return tree
}

func sameTree(t *testing.T, got map[string][]byte, want []metadata.File) {
	t.Helper()
	w := treeOf(want)
	for p, b := range w {
		g, ok := got[p]
		switch {
		case !ok:
			t.Errorf("missing %s", p)
		case !bytes.Equal(g, b):
			t.Errorf("%s: got %d bytes, want %d (contents differ)", p, len(g), len(b))
		}
	}
	for p := range got {
		if _, ok := w[p]; !ok {
			t.Errorf("unexpected file %s", p)
		}
	}
}

func build(t testing.TB, files []metadata.File, opts configdrive.Options) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "disk.config")
	if err := configdrive.Build(p, files, opts); err != nil {
		t.Fatalf("Build: %v", err)
	}
	return p
}

func TestRoundTrip(t *testing.T) {
	for _, format := range []configdrive.Format{configdrive.ISO9660, configdrive.VFAT} {
		t.Run(string(format), func(t *testing.T) {
			for name, files := range map[string][]metadata.File{"sample": configdrive.SampleFiles(), "edge": edgeFiles()} {
				p := build(t, files, configdrive.Options{Format: format})
				tree := readDrive(t, name, p, files)
				// What the rest of vmeta compares: the tree's own view.
				if !reflect.DeepEqual(tree.ConfigDriveFiles(), normalise(files)) && name == "sample" {
					t.Errorf("%s: ConfigDriveFiles of the read tree differ from the input", name)
				}
			}
		})
	}
}

// normalise turns nil data into empty slices, as Read returns them.
func normalise(files []metadata.File) []metadata.File {
	out := slices.Clone(files)
	for i := range out {
		if out[i].Data == nil {
			out[i].Data = []byte{}
		}
	}
	return out
}

// TestISOSizeIsVolumeSize: the image ends exactly at the volume space size
// recorded in the primary volume descriptor (no preallocated tail).
func TestISOSizeIsVolumeSize(t *testing.T) {
	p := build(t, configdrive.SampleFiles(), configdrive.Options{})
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	pvd := b[16*2048:]
	if pvd[0] != 1 || string(pvd[1:6]) != "CD001" {
		t.Fatalf("no primary volume descriptor")
	}
	blocks := binary.LittleEndian.Uint32(pvd[80:])
	bs := binary.LittleEndian.Uint16(pvd[128:])
	if got, want := int64(len(b)), int64(blocks)*int64(bs); got != want {
		t.Errorf("image is %d bytes, volume is %d", got, want)
	}
	if pub := strings.TrimRight(string(pvd[318:318+128]), " \x00"); pub != "vmeta" {
		t.Errorf("publisher %q, want vmeta", pub)
	}
	t.Logf("sample ISO: %d bytes", len(b))
}

func TestWriteISO(t *testing.T) {
	files := configdrive.SampleFiles()
	var buf bytes.Buffer
	n, err := configdrive.WriteISO(&buf, files, configdrive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Errorf("WriteISO returned %d, wrote %d", n, buf.Len())
	}
	p := filepath.Join(t.TempDir(), "streamed.iso")
	if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	readDrive(t, "streamed ISO", p, files)

	built, err := os.Stat(build(t, files, configdrive.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	if built.Size() != n {
		t.Errorf("Build made %d bytes, WriteISO %d", built.Size(), n)
	}
	if _, err := configdrive.WriteISO(&buf, files, configdrive.Options{Format: configdrive.VFAT}); err == nil {
		t.Error("WriteISO accepted Format vfat")
	}
}

func TestOptions(t *testing.T) {
	files := configdrive.SampleFiles()
	p := build(t, files, configdrive.Options{Label: "CONFIG-2", Publisher: "OpenStack Nova 31.0.0"})
	if _, label, err := configdrive.Read(p); err != nil || label != "CONFIG-2" {
		t.Errorf("Read: label %q, %v", label, err)
	}
	p = build(t, files, configdrive.Options{Format: configdrive.VFAT, Label: "CONFIG-2"})
	if _, label, err := configdrive.Read(p); err != nil || label != "CONFIG-2" {
		t.Errorf("Read vfat: label %q, %v", label, err)
	}
	dir := t.TempDir()
	for _, o := range []configdrive.Options{
		{Format: "ext4"},
		{Label: strings.Repeat("x", 33)},
		{Format: configdrive.VFAT, Label: "twelve-chars"},
		{Label: "bad\nlabel"},
		{Publisher: strings.Repeat("p", 129)},
	} {
		if err := configdrive.Build(filepath.Join(dir, "x"), files, o); err == nil {
			t.Errorf("Build accepted %+v", o)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("rejected builds left %d files", len(ents))
	}
}

func TestBadInput(t *testing.T) {
	ok := metadata.File{Path: "openstack/latest/meta_data.json", Data: []byte("{}")}
	cases := []struct {
		name   string
		files  []metadata.File
		format configdrive.Format
		path   string // the path the error must name
	}{
		{"absolute", []metadata.File{ok, {Path: "/openstack/latest/user_data"}}, "", "/openstack/latest/user_data"},
		{"dotdot", []metadata.File{ok, {Path: "openstack/../../etc/passwd"}}, "", "openstack/../../etc/passwd"},
		{"bare dotdot", []metadata.File{{Path: ".."}}, "", ".."},
		{"dotdot component", []metadata.File{{Path: "../x"}}, "", "../x"},
		{"empty", []metadata.File{ok, {Path: ""}}, "", `""`},
		{"duplicate", []metadata.File{ok, ok}, "", ok.Path},
		{"empty component", []metadata.File{{Path: "openstack//latest"}}, "", "openstack//latest"},
		{"trailing slash", []metadata.File{{Path: "openstack/latest/"}}, "", "openstack/latest/"},
		{"dot", []metadata.File{{Path: "./openstack"}}, "", "./openstack"},
		{"root", []metadata.File{{Path: "."}}, "", `"."`},
		{"file is a dir", []metadata.File{ok, {Path: "openstack/latest"}}, "", "openstack/latest"},
		{"dir is a file", []metadata.File{{Path: "openstack"}, ok}, "", ok.Path},
		{"hidden", []metadata.File{{Path: "openstack/.hidden"}}, "", "openstack/.hidden"},
		{"nul", []metadata.File{{Path: "a\x00b"}}, "", `a\x00b`},
		{"too long", []metadata.File{{Path: strings.Repeat("n", 256)}}, "", strings.Repeat("n", 256)},
		{"too long for iso", []metadata.File{{Path: "d/" + strings.Repeat("n", 251)}}, "", strings.Repeat("n", 251)},
		{"too long for vfat", []metadata.File{{Path: strings.Repeat("n", 256)}}, configdrive.VFAT, strings.Repeat("n", 256)},
		{"too deep", []metadata.File{{Path: "1/2/3/4/5/6/7/8/9"}}, "", "1/2/3/4/5/6/7/8/9"},
		{"fat case clash", []metadata.File{{Path: "a/B"}, {Path: "a/b"}}, configdrive.VFAT, "a/b"},
		{"fat character", []metadata.File{{Path: "a:b"}}, configdrive.VFAT, "a:b"},
		{"none", nil, "", "no files"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			err := configdrive.Build(filepath.Join(dir, "disk.config"), tc.files, configdrive.Options{Format: tc.format})
			if err == nil {
				t.Fatal("Build accepted it")
			}
			if !strings.Contains(err.Error(), tc.path) {
				t.Errorf("error %q does not name %s", err, tc.path)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("left %d files behind", len(ents))
			}
			if tc.format == "" {
				if _, err := configdrive.WriteISO(&bytes.Buffer{}, tc.files, configdrive.Options{}); err == nil {
					t.Error("WriteISO accepted it")
				}
			}
		})
	}
}

// TestNameLimits: ISO names are limited to 250 bytes (one Rock Ridge NM
// entry, which our reader reads whole), vfat names to 255.
func TestNameLimits(t *testing.T) {
	for _, n := range []int{251, 255} {
		files := []metadata.File{{Path: "d/" + strings.Repeat("v", n), Data: []byte("x")}}
		p := build(t, files, configdrive.Options{Format: configdrive.VFAT})
		tree, _, err := configdrive.Read(p)
		if err != nil {
			t.Fatal(err)
		}
		sameTree(t, tree.Files, files)
		err = configdrive.Build(filepath.Join(t.TempDir(), "x"), files, configdrive.Options{})
		if err == nil || !strings.Contains(err.Error(), "250") {
			t.Errorf("ISO Build of a %d-byte name: %v, want an error naming the 250-byte limit", n, err)
		}
	}
}

// TestBuildAtomic: a failed Build leaves the old image byte-identical and no
// temporary files; a successful one replaces it and leaves nothing else.
func TestBuildAtomic(t *testing.T) {
	for _, format := range []configdrive.Format{configdrive.ISO9660, configdrive.VFAT} {
		t.Run(string(format), func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "disk.config")
			old := []byte("the previous drive")
			if err := os.WriteFile(p, old, 0o600); err != nil {
				t.Fatal(err)
			}
			bad := append(configdrive.SampleFiles(), metadata.File{Path: "openstack/../x"})
			if err := configdrive.Build(p, bad, configdrive.Options{Format: format}); err == nil {
				t.Fatal("Build accepted a bad path")
			}
			if b, _ := os.ReadFile(p); !bytes.Equal(b, old) {
				t.Errorf("old file changed to %d bytes", len(b))
			}
			// A path whose parent is a file: the temporary file cannot be made.
			if err := configdrive.Build(filepath.Join(p, "sub"), configdrive.SampleFiles(), configdrive.Options{Format: format}); err == nil {
				t.Error("Build into a file's \"directory\" succeeded")
			}
			onlyFile(t, dir, "disk.config")

			if err := configdrive.Build(p, configdrive.SampleFiles(), configdrive.Options{Format: format}); err != nil {
				t.Fatal(err)
			}
			onlyFile(t, dir, "disk.config")
			if _, _, err := configdrive.Read(p); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestBuildFailsLate: a failure after the image was written (the target is a
// non-empty directory, so the final rename fails) removes the temporary file.
func TestBuildFailsLate(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "disk.config")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "keep"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := configdrive.Build(target, configdrive.SampleFiles(), configdrive.Options{}); err == nil {
		t.Fatal("Build over a non-empty directory succeeded")
	}
	onlyFile(t, dir, "disk.config")
}

func onlyFile(t *testing.T, dir, name string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 1 || names[0] != name {
		t.Errorf("%s holds %q, want only %s", dir, names, name)
	}
}

func TestConcurrentBuilds(t *testing.T) {
	files := configdrive.SampleFiles()
	dir := t.TempDir()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			format := configdrive.ISO9660
			if i%4 == 3 {
				format = configdrive.VFAT
			}
			p := filepath.Join(dir, fmt.Sprintf("d%d", i))
			if err := configdrive.Build(p, files, configdrive.Options{Format: format}); err != nil {
				errs <- err
				return
			}
			tree, _, err := configdrive.Read(p)
			if err == nil && len(tree.Files) != len(files) {
				err = fmt.Errorf("%s: %d files", p, len(tree.Files))
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestReadNoFilesystem(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "garbage.img")
	junk := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range junk {
		junk[i] = byte(rng.UintN(256))
	}
	if err := os.WriteFile(p, junk, 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := configdrive.Read(p)
	if !errors.Is(err, configdrive.ErrNoFilesystem) || !strings.Contains(err.Error(), p) {
		t.Errorf("Read(garbage) = %v, want ErrNoFilesystem naming %s", err, p)
	}
	if _, _, err := configdrive.Read(filepath.Join(dir, "missing")); err == nil {
		t.Error("Read of a missing file succeeded")
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := configdrive.Read(empty); err == nil {
		t.Error("Read of an empty file succeeded")
	}
}

// writeTree writes files under dir as ordinary files.
func writeTree(t testing.TB, dir string, files []metadata.File) {
	t.Helper()
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// readDirTree reads every regular file under dir.
func readDirTree(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	m := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		m[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func run(t testing.TB, name string, args ...string) []byte {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		var stderr []byte
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr)
	}
	return out
}

func lines(b []byte) []string {
	ls := strings.Split(strings.TrimSpace(string(b)), "\n")
	sort.Strings(ls)
	return ls
}

// genisoimage builds files with Nova's flags (minus -J unless joliet) and
// returns the image path.
func genisoimage(t *testing.T, files []metadata.File, joliet bool) string {
	t.Helper()
	bin := testenv.LookPath(t, "genisoimage")
	src := filepath.Join(t.TempDir(), "tree")
	writeTree(t, src, files)
	out := filepath.Join(t.TempDir(), "theirs.iso")
	args := []string{"-o", out, "-ldots", "-allow-lowercase", "-allow-multidot", "-l",
		"-publisher", "vmeta", "-quiet", "-r", "-V", "config-2"}
	if joliet {
		args = append(args, "-J")
	}
	run(t, bin, append(args, src)...)
	return out
}

// TestGenisoimageCompat compares our ISO with genisoimage's for the same tree
// through the tools guests and operators use.
func TestGenisoimageCompat(t *testing.T) {
	isoinfo := testenv.LookPath(t, "isoinfo")
	files := edgeFiles()
	ours := build(t, files, configdrive.Options{})
	theirs := genisoimage(t, files, false)

	got := lines(run(t, isoinfo, "-R", "-f", "-i", ours))
	want := lines(run(t, isoinfo, "-R", "-f", "-i", theirs))
	if !slices.Equal(got, want) {
		t.Errorf("isoinfo -R -f differs:\nours:   %q\ntheirs: %q", got, want)
	}
	for _, p := range []string{"openstack/latest/meta_data.json", "ec2/latest/meta-data.json", "openstack/content/0002", "openstack/content/0001"} {
		b := run(t, isoinfo, "-R", "-i", ours, "-x", "/"+p)
		if !bytes.Equal(b, treeOf(files)[p]) {
			t.Errorf("isoinfo -x /%s: %d bytes differ from the input", p, len(b))
		}
	}

	os1, _ := os.Stat(ours)
	ts, _ := os.Stat(theirs)
	t.Logf("image size: ours %d bytes, genisoimage %d bytes", os1.Size(), ts.Size())
	if os1.Size() > ts.Size() {
		t.Errorf("our image (%d bytes) is larger than genisoimage's (%d)", os1.Size(), ts.Size())
	}

	// Our reader on genisoimage's images, with and without Joliet. Names
	// longer than ~146 bytes are left out: see TestReadLimitations.
	short := slices.DeleteFunc(slices.Clone(files), func(f metadata.File) bool { return len(f.Path) > 100 })
	for _, img := range []string{genisoimage(t, short, false), genisoimage(t, short, true)} {
		tree, label, err := configdrive.Read(img)
		if err != nil {
			t.Fatalf("Read(genisoimage image): %v", err)
		}
		if label != "config-2" {
			t.Errorf("label of genisoimage image %q", label)
		}
		sameTree(t, tree.Files, short)
	}
}

// TestReadLimitations pins two go-diskfs (v1.9.4) reader limitations, so
// that an upgrade fixing them is noticed (then drop them from Read's doc):
//
//   - genisoimage splits a Rock Ridge name that does not fit in the directory
//     record (about 147 bytes and up) into several NM entries, and go-diskfs
//     keeps only the first. Config drives never have such names; images built
//     by this package carry one NM entry per name and read back fully.
//   - Joliet without Rock Ridge (genisoimage -J without -r; Nova always
//     passes -r) fails below the first directory level.
func TestReadLimitations(t *testing.T) {
	long := strings.Repeat("n", 200)
	files := []metadata.File{{Path: "d/" + long, Data: []byte("x")}}
	tree, _, err := configdrive.Read(genisoimage(t, files, false))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tree.Files["d/"+long]; ok {
		t.Errorf("go-diskfs now reads continued Rock Ridge NM entries")
	}
	for p := range tree.Files {
		t.Logf("200-byte name read as %d bytes (known go-diskfs limitation)", len(p)-2)
	}

	bin := testenv.LookPath(t, "genisoimage")
	src := filepath.Join(t.TempDir(), "tree")
	writeTree(t, src, configdrive.SampleFiles())
	img := filepath.Join(t.TempDir(), "joliet.iso")
	run(t, bin, "-o", img, "-quiet", "-J", "-V", "config-2", src)
	if _, _, err := configdrive.Read(img); err == nil {
		t.Errorf("go-diskfs now reads Joliet-only images")
	} else {
		t.Logf("Joliet-only image: %v (known go-diskfs limitation)", err)
	}
}

func TestBlkid(t *testing.T) {
	blkid := testenv.LookPath(t, "blkid")
	for format, typ := range map[configdrive.Format]string{configdrive.ISO9660: "iso9660", configdrive.VFAT: "vfat"} {
		p := build(t, configdrive.SampleFiles(), configdrive.Options{Format: format})
		out := string(run(t, blkid, "-p", "-o", "export", p))
		for _, kv := range []string{"LABEL=config-2", "TYPE=" + typ} {
			if !slices.Contains(strings.Split(out, "\n"), kv) {
				t.Errorf("%s: blkid lacks %s:\n%s", format, kv, out)
			}
		}
	}
}

// TestISOTools: isoinfo and xorriso (libisofs) read our volume descriptor
// and Rock Ridge signatures without complaint.
func TestISOTools(t *testing.T) {
	isoinfo := testenv.LookPath(t, "isoinfo")
	xorriso := testenv.LookPath(t, "xorriso")
	p := build(t, edgeFiles(), configdrive.Options{})

	cmd := exec.Command(isoinfo, "-d", "-i", p)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || stderr.Len() > 0 {
		t.Fatalf("isoinfo -d: %v\n%s%s", err, out, stderr.Bytes())
	}
	info := strings.Split(string(out), "\n")
	for _, want := range []string{"Volume id: config-2", "Publisher id: vmeta", "System id: LINUX",
		"Logical block size is: 2048", "NO Joliet present", "Rock Ridge signatures version 1 found"} {
		if !slices.Contains(info, want) {
			t.Errorf("isoinfo -d lacks %q:\n%s", want, out)
		}
	}

	out, err = exec.Command(xorriso, "-report_about", "WARNING", "-abort_on", "WARNING",
		"-indev", p, "-pvd_info", "-find", "/", "-exec", "report_damage").CombinedOutput()
	if err != nil {
		t.Fatalf("xorriso: %v\n%s", err, out)
	}
	for _, bad := range []string{"WARNING", "SORRY", "FAILURE", "FATAL", "damage"} {
		if bytes.Contains(out, []byte(bad)) {
			t.Errorf("xorriso reports %s:\n%s", bad, out)
		}
	}
	if !bytes.Contains(out, []byte("Volume Id    : config-2\n")) {
		t.Errorf("xorriso -pvd_info lacks the volume id:\n%s", out)
	}
}

// TestBigDirectoryAndDeepTree: a directory spanning several blocks (200
// files) and a tree eight levels deep with files at every level, compared
// with genisoimage's image of the same tree and read back by every reader.
func TestBigDirectoryAndDeepTree(t *testing.T) {
	isoinfo := testenv.LookPath(t, "isoinfo")
	xorriso := testenv.LookPath(t, "xorriso")
	var files []metadata.File
	for i := range 200 {
		files = append(files, metadata.File{Path: fmt.Sprintf("openstack/content/file-%04d.json", i), Data: []byte(strconv.Itoa(i))})
	}
	dir := ""
	for i := range 7 {
		files = append(files, metadata.File{Path: dir + "f" + strconv.Itoa(i), Data: []byte(dir)})
		dir += fmt.Sprintf("level-%d.d/", i+1)
	}
	files = append(files, metadata.File{Path: dir + "deepest", Data: []byte("eight levels down")})
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })

	ours := build(t, files, configdrive.Options{})
	theirs := genisoimage(t, files, false)
	got := lines(run(t, isoinfo, "-R", "-f", "-i", ours))
	want := lines(run(t, isoinfo, "-R", "-f", "-i", theirs))
	if !slices.Equal(got, want) {
		t.Errorf("isoinfo -R -f differs:\nours:   %q\ntheirs: %q", got, want)
	}
	// The directory really spans several blocks: its "." entry's size.
	listing := string(run(t, isoinfo, "-R", "-l", "-i", ours))
	_, after, _ := strings.Cut(listing, "Directory listing of /openstack/content/\n")
	dot, _, _ := strings.Cut(after, "\n")
	if f := strings.Fields(dot); len(f) < 5 || f[4] == "2048" {
		t.Errorf("/openstack/content is not several blocks: %q", dot)
	}
	for _, p := range []string{"openstack/content/file-0000.json", "openstack/content/file-0199.json", dir + "deepest"} {
		if b := run(t, isoinfo, "-R", "-i", ours, "-x", "/"+p); !bytes.Equal(b, treeOf(files)[p]) {
			t.Errorf("isoinfo -x /%s: %q", p, b)
		}
	}
	dst := filepath.Join(t.TempDir(), "x")
	run(t, xorriso, "-abort_on", "WARNING", "-osirrox", "on", "-indev", ours, "-extract", "/", dst)
	sameTree(t, readDirTree(t, dst), files)
	readDrive(t, "big ISO", ours, files)
}

// TestXorrisoExtract unpacks our ISO with xorriso (libisofs, an independent
// Rock Ridge reader) and compares the result with the input.
func TestXorrisoExtract(t *testing.T) {
	xorriso := testenv.LookPath(t, "xorriso")
	files := edgeFiles()
	ours := build(t, files, configdrive.Options{})
	dst := filepath.Join(t.TempDir(), "x")
	run(t, xorriso, "-abort_on", "WARNING", "-osirrox", "on", "-indev", ours, "-extract", "/", dst)
	sameTree(t, readDirTree(t, dst), files)
}

// TestVFATTools checks the vfat image with dosfstools' fsck (read-only) and
// mtools, which cloudbase-init uses to read vfat config drives.
func TestVFATTools(t *testing.T) {
	fsck := testenv.LookPath(t, "fsck.fat")
	mcopy := testenv.LookPath(t, "mcopy")
	files := edgeFiles()
	p := build(t, files, configdrive.Options{Format: configdrive.VFAT})
	out, err := exec.Command(fsck, "-n", "-V", p).CombinedOutput()
	if err != nil {
		t.Errorf("fsck.fat -n -V: %v\n%s", err, out)
	}
	if bytes.Contains(out, []byte("less than the required minimum")) {
		t.Errorf("fsck.fat warns about the cluster count:\n%s", out)
	}
	dst := t.TempDir()
	cmd := exec.Command(mcopy, "-s", "-n", "-i", p, "::/openstack", "::/ec2", "::/deep", dst)
	cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mcopy: %v\n%s", err, out)
	}
	sameTree(t, readDirTree(t, dst), files)
}

// TestCloudInit reads unpacked drives with cloud-init's own config-drive
// reader (the consumer that matters).
func TestCloudInit(t *testing.T) {
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import cloudinit.sources.helpers.openstack").Run(); err != nil {
		testenv.Require(t, "cloud-init", "python3 cannot import cloudinit (apt-get install cloud-init)")
	}
	xorriso := testenv.LookPath(t, "xorriso")
	mcopy := testenv.LookPath(t, "mcopy")
	files := configdrive.SampleFiles()
	for _, format := range []configdrive.Format{configdrive.ISO9660, configdrive.VFAT} {
		p := build(t, files, configdrive.Options{Format: format})
		dst := filepath.Join(t.TempDir(), "drive")
		var cmd *exec.Cmd
		if format == configdrive.ISO9660 {
			cmd = exec.Command(xorriso, "-osirrox", "on", "-indev", p, "-extract", "/", dst)
		} else {
			if err := os.Mkdir(dst, 0o755); err != nil {
				t.Fatal(err)
			}
			cmd = exec.Command(mcopy, "-s", "-n", "-i", p, "::/openstack", "::/ec2", dst)
			cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: unpack: %v\n%s", format, err, out)
		}
		script := `import sys
from cloudinit.sources.helpers import openstack
r = openstack.ConfigDriveReader(sys.argv[1]).read_v2()
print(r["metadata"]["instance-id"], r["version"], r["ec2-metadata"]["instance-id"], len(r["files"]))`
		out := strings.TrimSpace(string(run(t, py, "-c", script, dst)))
		if want := "d4f6b1a2-3c5e-4f70-8a9b-0c1d2e3f4a5b 2 i-00000001 1"; out != want {
			t.Errorf("%s: cloud-init read %q, want %q", format, out, want)
		}
	}
}

// TestReadLoopDevice reads drives through a loop device, which reports
// 512-byte logical sectors like virtio-blk, exercising Read's fallback to
// 2048-byte ISO blocks end to end. Loop devices need root; without them the
// fallback is still covered by TestReadISO2048Fallback (internal test on the
// image file).
func TestReadLoopDevice(t *testing.T) {
	losetup := testenv.LookPath(t, "losetup")
	files := configdrive.SampleFiles()
	for _, format := range []configdrive.Format{configdrive.ISO9660, configdrive.VFAT} {
		p := build(t, files, configdrive.Options{Format: format})
		out, err := exec.Command(losetup, "-f", "--show", "--read-only", p).Output()
		if err != nil {
			testenv.Require(t, "loop devices", fmt.Sprintf("losetup not permitted here (%v); the fallback is covered by TestReadISO2048Fallback", err))
		}
		dev := strings.TrimSpace(string(out))
		t.Cleanup(func() {
			if out, err := exec.Command(losetup, "-d", dev).CombinedOutput(); err != nil {
				t.Errorf("losetup -d %s: %v\n%s", dev, err, out)
			}
		})
		if ss, err := os.ReadFile("/sys/block/" + filepath.Base(dev) + "/queue/logical_block_size"); err == nil {
			t.Logf("%s: %s logical sector size %s", format, dev, strings.TrimSpace(string(ss)))
		}
		tree, label, err := configdrive.Read(dev)
		if err != nil {
			t.Fatalf("%s: Read(%s): %v", format, dev, err)
		}
		if label != "config-2" {
			t.Errorf("%s: label %q", format, label)
		}
		sameTree(t, tree.Files, files)
	}
}

func FuzzRead(f *testing.F) {
	files := []metadata.File{
		{Path: "openstack/latest/meta_data.json", Data: []byte(`{"uuid":"x"}`)},
		{Path: "ec2/latest/meta-data.json", Data: []byte(`{}`)},
		{Path: "openstack/content/0000", Data: []byte{}},
	}
	p := filepath.Join(f.TempDir(), "seed.iso")
	if err := configdrive.Build(p, files, configdrive.Options{}); err != nil {
		f.Fatal(err)
	}
	iso, err := os.ReadFile(p)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(iso)
	// Our vfat drives are 32.5 MiB (sparse), far too big a fuzz input; seed
	// with a 128 KiB FAT32 made by go-diskfs directly, which Read accepts.
	f.Add(smallFAT32(f, files))
	f.Add([]byte{})
	f.Add(make([]byte, 40<<10))

	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(dir, "img")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		// Read bounds its own work (see readguard.go); no wall-clock
		// watchdog here, which fired on a loaded machine.
		tree, _, err := configdrive.Read(p)
		if err == nil && tree == nil {
			t.Fatal("nil tree without error")
		}
	})
}

// TestReadRecoversPanic reads a fuzzer-found image on which go-diskfs
// v1.9.4 panics (slice bounds out of range parsing a directory entry).
func TestReadRecoversPanic(t *testing.T) {
	raw, err := os.ReadFile("testdata/fuzz/FuzzRead/28983e081f6616cb")
	if err != nil {
		t.Fatal(err)
	}
	lit := strings.TrimSpace(strings.SplitN(string(raw), "\n", 2)[1])
	data, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lit, "[]byte("), ")"))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "corrupt.iso")
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err = configdrive.Read(p)
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("Read = %v, want an error naming %s", err, p)
	}
	t.Log(err)
}

func smallFAT32(f *testing.F, files []metadata.File) []byte {
	const size = 128 << 10
	p := filepath.Join(f.TempDir(), "seed.vfat")
	img, err := os.Create(p)
	if err != nil {
		f.Fatal(err)
	}
	defer img.Close()
	if err := img.Truncate(size); err != nil {
		f.Fatal(err)
	}
	fsys, err := fat32.Create(file.New(img, false), size, 0, 512, "config-2", true)
	if err != nil {
		f.Fatal(err)
	}
	for _, fl := range files {
		if err := fsys.Mkdir(filepath.Dir(fl.Path)); err != nil {
			f.Fatal(err)
		}
		w, err := fsys.OpenFile(fl.Path, os.O_CREATE|os.O_RDWR)
		if err != nil {
			f.Fatal(err)
		}
		if _, err := w.Write(fl.Data); err != nil {
			f.Fatal(err)
		}
		w.Close()
	}
	b, err := os.ReadFile(p)
	if err != nil {
		f.Fatal(err)
	}
	return b
}

func benchmarkBuild(b *testing.B, format configdrive.Format) {
	files := configdrive.SampleFiles()
	dir := b.TempDir()
	p := filepath.Join(dir, "disk.config")
	var size int64
	for b.Loop() {
		if err := configdrive.Build(p, files, configdrive.Options{Format: format}); err != nil {
			b.Fatal(err)
		}
	}
	if st, err := os.Stat(p); err == nil {
		size = st.Size()
	}
	b.ReportMetric(float64(size), "image-bytes")
}

func BenchmarkBuildISO(b *testing.B)  { benchmarkBuild(b, configdrive.ISO9660) }
func BenchmarkBuildVFAT(b *testing.B) { benchmarkBuild(b, configdrive.VFAT) }

// BenchmarkWriteISO is the in-memory build alone: validation, layout and
// streaming the image to io.Discard, no file system.
func BenchmarkWriteISO(b *testing.B) {
	files := configdrive.SampleFiles()
	var n int64
	for b.Loop() {
		var err error
		if n, err = configdrive.WriteISO(io.Discard, files, configdrive.Options{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n), "image-bytes")
}

func BenchmarkRead(b *testing.B) {
	p := build(b, configdrive.SampleFiles(), configdrive.Options{})
	for b.Loop() {
		if _, _, err := configdrive.Read(p); err != nil {
			b.Fatal(err)
		}
	}
}
