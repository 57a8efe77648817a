package layout_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/encryption/policy"
	"github.com/vmeta/vmeta/hostctl/flavors"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/layout"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// fakeFlavors is a flavor registry in memory; fail, when set, fails
// every lookup.
type fakeFlavors struct {
	m    map[string]flavors.Flavor
	fail error
}

func (f fakeFlavors) Get(_ context.Context, name string) (flavors.Flavor, error) {
	if f.fail != nil {
		return flavors.Flavor{}, f.fail
	}
	fl, ok := f.m[name]
	if !ok {
		return flavors.Flavor{}, fmt.Errorf("flavor %q: %w", name, store.ErrNotFound)
	}
	return fl, nil
}

// fakeImages is an image catalog in memory; fail, when set, fails every
// lookup.
type fakeImages struct {
	m    map[string]images.Image
	fail error
}

func (f fakeImages) Get(_ context.Context, name string) (images.Image, error) {
	if f.fail != nil {
		return images.Image{}, f.fail
	}
	img, ok := f.m[name]
	if !ok {
		return images.Image{}, fmt.Errorf("image %q: %w", name, store.ErrNotFound)
	}
	return img, nil
}

var (
	small   = flavors.Flavor{Name: "f.small", VCPUs: 1, RAM: 128, Disk: 1, Swap: 16}
	big     = flavors.Flavor{Name: "f.big", VCPUs: 2, RAM: 256, Disk: 2, Ephemeral: 1, Swap: 32}
	tiny    = flavors.Flavor{Name: "f.tiny", VCPUs: 1, RAM: 64, Disk: 1} // no swap
	enc     = flavors.Flavor{Name: "f.enc", VCPUs: 1, RAM: 128, Disk: 1, ExtraSpecs: map[string]string{policy.FlavorEncryption: "true"}}
	encBig  = flavors.Flavor{Name: "f.enc.big", VCPUs: 2, RAM: 256, Disk: 2, ExtraSpecs: map[string]string{policy.FlavorEncryption: "true"}}
	plain   = flavors.Flavor{Name: "f.plain", VCPUs: 1, RAM: 128, Disk: 1, ExtraSpecs: map[string]string{policy.FlavorEncryption: "false"}}
	deb     = images.Image{Name: "deb", VirtualSize: 16 << 20}
	deb2    = images.Image{Name: "deb2", VirtualSize: 32 << 20}
	huge    = images.Image{Name: "huge", VirtualSize: 3 << 30}
	encImg  = images.Image{Name: "enc-img", VirtualSize: 16 << 20, Properties: map[string]string{policy.ImageEncryption: "true"}}
	errRead = errors.New("read failed")
)

// newLayout is a layout over the flavors and images above and this
// host's default encryption formats.
func newLayout() *layout.Layout {
	fl := fakeFlavors{m: map[string]flavors.Flavor{}}
	for _, f := range []flavors.Flavor{small, big, tiny, enc, encBig, plain} {
		fl.m[f.Name] = f
	}
	im := fakeImages{m: map[string]images.Image{}}
	for _, i := range []images.Image{deb, deb2, huge, encImg} {
		im.m[i.Name] = i
	}
	return &layout.Layout{Flavors: fl, Images: im, Encryption: layout.Policy{Host: layout.DefaultHost}}
}

func spec(t *testing.T, yaml string) *model.Instance {
	t.Helper()
	in, err := model.ParseSpec([]byte("name: app-1\n" + yaml))
	if err != nil {
		t.Fatalf("spec %q: %v", yaml, err)
	}
	return in
}

// disks is the disks of in as "name:kind:size:bus[:enc]" strings.
func disks(in *model.Instance) []string {
	var out []string
	for _, d := range in.Disks {
		s := fmt.Sprintf("%s:%s:%s:%s", d.Name, d.Kind, d.Size, d.Bus)
		if d.Encrypted {
			s += ":" + d.EncryptionFormat
		}
		out = append(out, s)
	}
	return out
}

// fieldOf is the field the one error of a *model.SpecError in err names
// ("" when err is none).
func fieldOf(err error) string {
	se, ok := errors.AsType[*model.SpecError](err)
	if !ok || len(se.Errors) != 1 {
		return ""
	}
	return se.Errors[0].Field
}

// TestLayoutApply: an apply's layout from the spec, its flavor and its
// image — Nova's disks, the flavor's size, the encryption decision — and
// every refusal, which leaves the spec as it was.
func TestLayoutApply(t *testing.T) {
	for _, tc := range []struct {
		name      string
		spec, old string // old: the stored spec ("" for a new instance)
		l         func(*layout.Layout)
		disks     []string
		cpus, mem int
		warn      string // a warning containing this
		is        error  // the error wraps this
		field     string // the error is a spec error naming this field
	}{
		{name: "flavor disks in Nova's order", spec: "flavor: f.big\nimage: deb\n",
			disks: []string{"vda:root:2G:virtio", "vdb:ephemeral:1G:virtio", "vdc:swap:32M:virtio"}, cpus: 2, mem: 256},
		{name: "spec names the root disk, other disks after", spec: "flavor: f.small\nimage: deb\ndisks: [{name: vdb, kind: root}, {name: sda, bus: scsi, size: 8M}]\n",
			disks: []string{"vdb:root:1G:virtio", "vda:swap:16M:virtio", "sda::8M:scsi"}, cpus: 1, mem: 128},
		{name: "no image, no root size: no root disk", spec: "flavor: f.eph\n",
			l: func(l *layout.Layout) {
				l.Flavors = fakeFlavors{m: map[string]flavors.Flavor{"f.eph": {Name: "f.eph", VCPUs: 1, RAM: 64, Ephemeral: 2}}}
			},
			disks: []string{"vda:ephemeral:2G:virtio"}, cpus: 1, mem: 64},
		{name: "encrypting flavor", spec: "flavor: f.enc\nimage: deb\n",
			disks: []string{"vda:root:1G:virtio:luks"}, cpus: 1, mem: 128},
		{name: "encrypting image", spec: "flavor: f.small\nimage: enc-img\n",
			disks: []string{"vda:root:1G:virtio:luks", "vdb:swap:16M:virtio:luks"}, cpus: 1, mem: 128},
		{name: "unregistered flavor is a label", spec: "flavor: m1.nope\ndisks: [{name: vda, size: 1G}]\n",
			disks: []string{"vda::1G:virtio"}, warn: "is not a registered flavor"},
		{name: "no registry: no warning", spec: "flavor: m1.nope\ndisks: [{name: vda, size: 1G}]\n",
			l: func(l *layout.Layout) { l.Flavors = nil }, disks: []string{"vda::1G:virtio"}},
		{name: "flavor registered after the instance", spec: "flavor: f.small\ndisks: [{name: vda, size: 1G}]\n", old: "flavor: f.small\ndisks: [{name: vda, size: 1G}]\n",
			disks: []string{"vda::1G:virtio"}, warn: "was registered after instance app-1 was created"},
		{name: "re-apply of a laid out instance", spec: "flavor: f.small\nimage: deb\n", old: "flavor: f.small\nimage: deb\nvcpus: 1\nmemory_mib: 128\ndisks: [{name: vda, kind: root, size: 1G}]\n",
			disks: []string{"vda:root:1G:virtio", "vdb:swap:16M:virtio"}, cpus: 1, mem: 128},

		{name: "vcpus other than the flavor's", spec: "flavor: f.small\nimage: deb\nvcpus: 4\n", is: model.ErrInvalidSpec, field: "vcpus"},
		{name: "memory other than the flavor's", spec: "flavor: f.small\nimage: deb\nmemory_mib: 512\n", is: model.ErrInvalidSpec, field: "memory_mib"},
		{name: "image larger than the root disk", spec: "flavor: f.small\nimage: huge\n", is: model.ErrInvalidSpec, field: "flavor"},
		{name: "kind the flavor has not", spec: "flavor: f.tiny\nimage: deb\ndisks: [{name: vdb, kind: swap}]\n", is: model.ErrInvalidSpec, field: "disks[0].kind"},
		{name: "two disks of one kind", spec: "flavor: f.small\nimage: deb\ndisks: [{name: vdb, kind: root}, {name: vdc, kind: root}]\n", is: model.ErrInvalidSpec, field: "disks[1].kind"},
		{name: "size other than the flavor's", spec: "flavor: f.small\nimage: deb\ndisks: [{name: vdb, kind: root, size: 5G}]\n", is: model.ErrInvalidSpec, field: "disks[0].size"},
		{name: "kind without a registered flavor", spec: "flavor: m1.nope\ndisks: [{name: vda, kind: root, size: 1G}]\n", is: model.ErrInvalidSpec, field: "disks[0].kind"},
		{name: "flavor of a laid out instance changed", spec: "flavor: f.big\nimage: deb\n", old: "flavor: f.small\nimage: deb\nvcpus: 1\nmemory_mib: 128\ndisks: [{name: vda, kind: root, size: 1G}]\n", is: part.ErrState},
		{name: "image of a laid out instance changed", spec: "flavor: f.small\nimage: deb2\n", old: "flavor: f.small\nimage: deb\nvcpus: 1\nmemory_mib: 128\ndisks: [{name: vda, kind: root, size: 1G}]\n", is: part.ErrState},
		{name: "registered flavor for an instance made without one", spec: "flavor: f.big\ndisks: [{name: vda, size: 1G}]\n", old: "flavor: m1.old\ndisks: [{name: vda, size: 1G}]\n", is: part.ErrState},
		{name: "flavor and image disagree on encryption", spec: "flavor: f.plain\nimage: enc-img\n", is: store.ErrConflict},
		{name: "disk asks for encryption the flavor refuses", spec: "flavor: f.plain\nimage: deb\ndisks: [{name: vda, kind: root, encrypted: true}]\n", is: store.ErrConflict},
		{name: "flavor lookup fails", spec: "flavor: f.small\nimage: deb\n", l: func(l *layout.Layout) { l.Flavors = fakeFlavors{fail: errRead} }, is: errRead},
		{name: "image lookup fails", spec: "flavor: f.small\nimage: deb\n", l: func(l *layout.Layout) { l.Images = fakeImages{fail: errRead} }, is: errRead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLayout()
			if tc.l != nil {
				tc.l(l)
			}
			in := spec(t, tc.spec)
			var old *model.Instance
			if tc.old != "" {
				old = spec(t, tc.old)
			}
			warn, err := l.Apply(context.Background(), in, old)
			if tc.is != nil {
				if !errors.Is(err, tc.is) {
					t.Fatalf("err = %v, want one wrapping %v", err, tc.is)
				}
				if got := fieldOf(err); got != tc.field {
					t.Errorf("err %v names field %q, want %q", err, got, tc.field)
				}
				if !strings.Contains(err.Error(), "apply app-1") {
					t.Errorf("err %v does not name the apply", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := disks(in); !reflect.DeepEqual(got, tc.disks) {
				t.Errorf("disks = %q, want %q", got, tc.disks)
			}
			if in.VCPUs != tc.cpus || in.MemoryMiB != tc.mem {
				t.Errorf("vcpus, memory = %d, %d; want %d, %d", in.VCPUs, in.MemoryMiB, tc.cpus, tc.mem)
			}
			if got := strings.Join(warn, "\n"); tc.warn == "" && got != "" || !strings.Contains(got, tc.warn) {
				t.Errorf("warnings = %q, want one containing %q", got, tc.warn)
			}
		})
	}
}

// laidOut is a stored instance laid out by flavor f.small from image
// deb.
const laidOut = "flavor: f.small\nimage: deb\nvcpus: 1\nmemory_mib: 128\n" +
	"disks: [{name: vda, kind: root, size: 1G, bus: virtio}, {name: vdb, kind: swap, size: 16M, bus: virtio}, {name: sda, bus: scsi, size: 8M}]\n"

// TestLayoutResize: a resize lays the instance out for the new flavor,
// growing its flavor disks (and adding the new flavor's), never
// shrinking or removing one, never changing its encryption; the stored
// instance is not changed.
func TestLayoutResize(t *testing.T) {
	for _, tc := range []struct {
		name, old, flavor string
		l                 func(*layout.Layout)
		disks             []string
		is                error
		msg               string
	}{
		{name: "grow and add", old: laidOut, flavor: "f.big",
			disks: []string{"vda:root:2G:virtio", "vdc:ephemeral:1G:virtio", "vdb:swap:32M:virtio", "sda::8M:scsi"}},
		{name: "encrypted flavor to encrypted flavor", old: "flavor: f.enc\nimage: deb\nvcpus: 1\nmemory_mib: 128\ndisks: [{name: vda, kind: root, size: 1G, encrypted: true, encryption_format: luks}]\n",
			flavor: "f.enc.big", disks: []string{"vda:root:2G:virtio:luks"}},
		{name: "no records", old: laidOut, flavor: "f.big", l: func(l *layout.Layout) { l.Flavors = nil }, is: layout.ErrNoRecords},
		{name: "unknown flavor", old: laidOut, flavor: "f.nope", is: store.ErrNotFound},
		{name: "same flavor", old: laidOut, flavor: "f.small", is: store.ErrConflict, msg: "has flavor f.small already"},
		{name: "not laid out by a flavor", old: "flavor: f.small\nimage: deb\ndisks: [{name: vda, size: 1G}]\n", flavor: "f.big", is: part.ErrState, msg: "not made from a registered flavor"},
		{name: "removes the swap disk", old: laidOut, flavor: "f.tiny", is: model.ErrInvalidSpec, msg: "flavor f.tiny has no swap disk"},
		{name: "shrinks the root disk", old: "flavor: f.big\nimage: deb\nvcpus: 2\nmemory_mib: 256\ndisks: [{name: vda, kind: root, size: 2G}]\n", flavor: "f.enc", is: store.ErrConflict},
		{name: "shrinks the swap disk", old: "flavor: f.big\nimage: deb\nvcpus: 2\nmemory_mib: 256\ndisks: [{name: vda, kind: root, size: 2G}, {name: vdb, kind: swap, size: 32M}]\n",
			flavor: "f.small", l: func(l *layout.Layout) {
				l.Flavors = fakeFlavors{m: map[string]flavors.Flavor{"f.big": big, "f.small": {Name: "f.small", VCPUs: 1, RAM: 128, Disk: 2, Swap: 16}}}
			}, is: store.ErrConflict, msg: "disks are never shrunk"},
		{name: "encryption would change", old: laidOut, flavor: "f.enc.big", is: store.ErrConflict, msg: "a resize cannot convert the disks"},
		{name: "image lookup fails", old: laidOut, flavor: "f.big", l: func(l *layout.Layout) { l.Images = fakeImages{fail: errRead} }, is: errRead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLayout()
			if tc.l != nil {
				tc.l(l)
			}
			old := spec(t, tc.old)
			stored := fmt.Sprint(*old, disks(old))
			in, f, err := l.Resize(context.Background(), old, tc.flavor)
			if got := fmt.Sprint(*old, disks(old)); got != stored {
				t.Errorf("the stored instance changed: %s, was %s", got, stored)
			}
			if tc.is != nil {
				if !errors.Is(err, tc.is) || !strings.Contains(fmt.Sprint(err), tc.msg) {
					t.Fatalf("err = %v, want one wrapping %v saying %q", err, tc.is, tc.msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f.Name != tc.flavor || in.Flavor != tc.flavor || in.VCPUs != f.VCPUs || in.MemoryMiB != f.RAM {
				t.Errorf("flavor %s, instance of flavor %s with %d vCPUs, %d MiB", f.Name, in.Flavor, in.VCPUs, in.MemoryMiB)
			}
			if got := disks(in); !reflect.DeepEqual(got, tc.disks) {
				t.Errorf("disks = %q, want %q", got, tc.disks)
			}
		})
	}
}

// TestLayoutRebuild: a rebuild takes another image for the root disk
// when it fits the flavor's root disk and keeps the encryption.
func TestLayoutRebuild(t *testing.T) {
	for _, tc := range []struct {
		name, old string
		img       images.Image
		is        error
		field     string
		encrypted bool
	}{
		{name: "another image", old: laidOut, img: deb2},
		{name: "spec disks, no flavor", old: "flavor: m1.label\nimage: deb\ndisks: [{name: vda, size: 1G}]\n", img: huge},
		{name: "encrypted image to encrypted image", old: "flavor: f.small\nimage: enc-img\nvcpus: 1\nmemory_mib: 128\ndisks: [{name: vda, kind: root, size: 1G, encrypted: true, encryption_format: luks}]\n",
			img: images.Image{Name: "enc2", Properties: encImg.Properties}, encrypted: true},
		{name: "too large for the root disk", old: laidOut, img: huge, is: model.ErrInvalidSpec, field: "image"},
		{name: "no disk from an image", old: "image: deb\n", img: deb2, is: part.ErrState},
		{name: "encryption would change", old: laidOut, img: encImg, is: store.ErrConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := spec(t, tc.old)
			in, err := newLayout().Rebuild(context.Background(), old, &tc.img)
			if tc.is != nil {
				if !errors.Is(err, tc.is) || fieldOf(err) != tc.field {
					t.Fatalf("err = %v, want one wrapping %v naming field %q", err, tc.is, tc.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if in.Image != tc.img.Name || old.Image == tc.img.Name {
				t.Errorf("rebuilt image %q, stored %q", in.Image, old.Image)
			}
			if got := in.Disks[layout.RootDisk(in)].Encrypted; got != tc.encrypted {
				t.Errorf("root disk encrypted = %t, want %t", got, tc.encrypted)
			}
		})
	}
}

// TestLayoutEncryptAttached: a disk attached later is encrypted as the
// instance's flavor or image says, and a label flavor says nothing.
func TestLayoutEncryptAttached(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		disk     model.Disk
		want     string // its format, "" unencrypted
		is       error
	}{
		{name: "encrypting flavor", in: "flavor: f.enc\nimage: deb\nvcpus: 1\nmemory_mib: 128\ndisks: [{name: vda, kind: root, size: 1G}]\n", disk: model.Disk{Name: "vdb", Size: "1G"}, want: "luks"},
		{name: "encrypting image", in: "image: enc-img\ndisks: [{name: vda, size: 1G}]\n", disk: model.Disk{Name: "vdb", Size: "1G"}, want: "luks"},
		{name: "flavor registered later is a label", in: "flavor: f.enc\ndisks: [{name: vda, size: 1G}]\n", disk: model.Disk{Name: "vdb", Size: "1G"}},
		{name: "plain", in: "flavor: f.small\nimage: deb\nvcpus: 1\nmemory_mib: 128\ndisks: [{name: vda, kind: root, size: 1G}]\n", disk: model.Disk{Name: "vdb", Size: "1G"}},
		{name: "disk asks for encryption the flavor refuses", in: "flavor: f.plain\nimage: deb\nvcpus: 1\nmemory_mib: 128\ndisks: [{name: vda, kind: root, size: 1G}]\n",
			disk: model.Disk{Name: "vdb", Size: "1G", Encrypted: true}, is: store.ErrConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := spec(t, tc.in)
			d := tc.disk
			err := newLayout().EncryptAttached(context.Background(), in, &d)
			if tc.is != nil {
				if !errors.Is(err, tc.is) || d != tc.disk {
					t.Fatalf("err = %v, disk %+v; want one wrapping %v, disk unchanged", err, d, tc.is)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Encrypted != (tc.want != "") || d.EncryptionFormat != tc.want {
				t.Errorf("disk encrypted %t, format %q; want format %q", d.Encrypted, d.EncryptionFormat, tc.want)
			}
		})
	}
}

func TestDiskBytes(t *testing.T) {
	for _, tc := range []struct {
		s  string
		n  int64
		ok bool
	}{
		{"", 0, false}, {"1048576", 1 << 20, true}, {"4K", 4 << 10, true}, {"512M", 512 << 20, true},
		{"10G", 10 << 30, true}, {"2T", 2 << 40, true}, {"G", 0, false}, {"-1G", 0, false},
		{"1.5G", 0, false}, {"10X", 0, false}, {"+5G", 0, false}, {"9223372036854775807G", 0, false},
		{"1024T", model.MaxDiskSize, true}, {"1025T", 0, false},
	} {
		if n, ok := layout.DiskBytes(tc.s); n != tc.n || ok != tc.ok {
			t.Errorf("DiskBytes(%q) = %d, %t; want %d, %t", tc.s, n, ok, tc.n, tc.ok)
		}
	}
}

func TestLayoutRootDisk(t *testing.T) {
	for _, tc := range []struct {
		in   model.Instance
		want int
	}{
		{model.Instance{Image: "deb", Disks: []model.Disk{{Name: "vda"}, {Name: "vdb"}}}, 0},
		{model.Instance{Disks: []model.Disk{{Name: "vda"}}}, -1},
		{model.Instance{Image: "deb"}, -1},
		{model.Instance{Image: "deb", Disks: []model.Disk{{Name: "vda", Kind: model.DiskKindSwap}, {Name: "vdb", Kind: model.DiskKindRoot}}}, 1},
		{model.Instance{Image: "deb", Disks: []model.Disk{{Name: "vda"}, {Name: "vdb", Kind: model.DiskKindEphemeral}}}, -1},
	} {
		if got := layout.RootDisk(&tc.in); got != tc.want {
			t.Errorf("RootDisk(%+v) = %d, want %d", tc.in.Disks, got, tc.want)
		}
	}
}

func TestLayoutLaidOut(t *testing.T) {
	for _, tc := range []struct {
		in   model.Instance
		want bool
	}{
		{model.Instance{Flavor: "f", VCPUs: 1, MemoryMiB: 64}, true},
		{model.Instance{Disks: []model.Disk{{Kind: model.DiskKindSwap}}}, true},
		{model.Instance{Flavor: "f", VCPUs: 1}, false},
		{model.Instance{VCPUs: 1, MemoryMiB: 64, Disks: []model.Disk{{Name: "vda"}}}, false},
	} {
		if got := layout.LaidOut(&tc.in); got != tc.want {
			t.Errorf("LaidOut(%+v) = %t, want %t", tc.in, got, tc.want)
		}
	}
}

// fakeTemplates records the templates asked of it.
type fakeTemplates struct{ asked []string }

func (f *fakeTemplates) Template(_ context.Context, kind string, size int) (images.Base, error) {
	f.asked = append(f.asked, fmt.Sprintf("%s %d", kind, size))
	return images.Base{}, nil
}

func TestLayoutBlankTemplate(t *testing.T) {
	for _, tc := range []struct {
		d    model.Disk
		want string // the template asked, "" none (an error)
	}{
		{model.Disk{Kind: model.DiskKindEphemeral, Size: "2G"}, "ephemeral 2"},
		{model.Disk{Kind: model.DiskKindSwap, Size: "32M"}, "swap 32"},
		{model.Disk{Kind: model.DiskKindSwap, Size: "1G"}, "swap 1024"},
		{model.Disk{Kind: model.DiskKindEphemeral, Size: "512M"}, ""},
		{model.Disk{Kind: model.DiskKindSwap, Size: "1048577"}, ""},
		{model.Disk{Kind: model.DiskKindRoot, Size: "1G"}, ""},
		{model.Disk{Kind: model.DiskKindSwap}, ""},
	} {
		var f fakeTemplates
		_, err := layout.BlankTemplate(context.Background(), &f, tc.d)
		if got := strings.Join(f.asked, ","); got != tc.want || (err != nil) != (tc.want == "") {
			t.Errorf("BlankTemplate(%+v) asked %q, err %v; want %q", tc.d, got, err, tc.want)
		}
		if err != nil && !strings.Contains(err.Error(), tc.d.Size+`"`) {
			t.Errorf("BlankTemplate(%+v): %v does not name the size", tc.d, err)
		}
	}
}
