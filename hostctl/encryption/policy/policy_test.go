package policy_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/encryption/policy"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

var host = policy.Host{Formats: []string{"luks"}, DefaultFormat: "luks"}

func flavor(t *testing.T, specs map[string]string) policy.Settings {
	t.Helper()
	s, err := policy.FlavorSettings("f1", specs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func image(t *testing.T, props map[string]string) policy.Settings {
	t.Helper()
	s, err := policy.ImageSettings("img", props)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const keyID = "0a81f5b2-8403-7b23-c8d6-21ccc2f80d6f"

func TestDecide(t *testing.T) {
	tests := []struct {
		name    string
		flavor  map[string]string
		image   map[string]string
		host    policy.Host
		encrypt bool
		format  string
		// conflict: every string must be in the 409's message.
		conflict []string
	}{
		{name: "nothing asked", encrypt: false},
		{name: "flavor asks", flavor: map[string]string{"hw:ephemeral_encryption": "true"}, encrypt: true, format: "luks"},
		{name: "flavor asks, True", flavor: map[string]string{"hw:ephemeral_encryption": "True"}, encrypt: true, format: "luks"},
		{name: "image asks, yes", image: map[string]string{"hw_ephemeral_encryption": "yes"}, encrypt: true, format: "luks"},
		{name: "both ask, 1 and on", flavor: map[string]string{"hw:ephemeral_encryption": "1"}, image: map[string]string{"hw_ephemeral_encryption": "on"}, encrypt: true, format: "luks"},
		{name: "both say no", flavor: map[string]string{"hw:ephemeral_encryption": "no"}, image: map[string]string{"hw_ephemeral_encryption": "false"}, encrypt: false},
		{name: "format alone turns nothing on", flavor: map[string]string{"hw:ephemeral_encryption_format": "luks"}, encrypt: false},
		{name: "encrypted source image: no surprise decryption", image: map[string]string{"os_encrypt_key_id": keyID, "os_encrypt_format": "luks"}, encrypt: true, format: "luks"},
		{name: "format from the request beats the source image's",
			flavor: map[string]string{"hw:ephemeral_encryption": "true", "hw:ephemeral_encryption_format": "luksv2"},
			image:  map[string]string{"os_encrypt_key_id": keyID, "os_encrypt_format": "luks"},
			host:   policy.Host{Formats: []string{"luks", "luksv2"}, DefaultFormat: "luks"}, encrypt: true, format: "luksv2"},
		{name: "format from the source image beats the host default",
			image: map[string]string{"os_encrypt_key_id": keyID, "os_encrypt_format": "luksv2"},
			host:  policy.Host{Formats: []string{"luks", "luksv2"}, DefaultFormat: "luks"}, encrypt: true, format: "luksv2"},
		{name: "host default", image: map[string]string{"hw_ephemeral_encryption": "true"},
			host: policy.Host{Formats: []string{"luks", "luksv2"}, DefaultFormat: "luksv2"}, encrypt: true, format: "luksv2"},
		{name: "image format with flavor's request", flavor: map[string]string{"hw:ephemeral_encryption": "true"}, image: map[string]string{"hw_ephemeral_encryption_format": "luks"}, encrypt: true, format: "luks"},

		{name: "flavor and image disagree on encryption",
			flavor:   map[string]string{"hw:ephemeral_encryption": "true"},
			image:    map[string]string{"hw_ephemeral_encryption": "false"},
			conflict: []string{`flavor "f1" (hw:ephemeral_encryption=true)`, `image "img" (hw_ephemeral_encryption=false)`}},
		{name: "flavor and image disagree on the format",
			flavor:   map[string]string{"hw:ephemeral_encryption": "true", "hw:ephemeral_encryption_format": "luks"},
			image:    map[string]string{"hw_ephemeral_encryption_format": "plain"},
			conflict: []string{`flavor "f1"`, "hw:ephemeral_encryption_format=luks", `image "img"`, "hw_ephemeral_encryption_format=plain"}},
		{name: "encrypted image meets the flavor's explicit false",
			flavor:   map[string]string{"hw:ephemeral_encryption": "false"},
			image:    map[string]string{"os_encrypt_key_id": keyID},
			conflict: []string{`image "img" is encrypted (os_encrypt_key_id=` + keyID, `flavor "f1" says hw:ephemeral_encryption=false`}},
		{name: "encrypted image meets its own explicit false",
			image:    map[string]string{"os_encrypt_key_id": keyID, "hw_ephemeral_encryption": "no"},
			conflict: []string{`image "img" is encrypted`, "hw_ephemeral_encryption=false"}},
		{name: "unsupported format from the flavor",
			flavor:   map[string]string{"hw:ephemeral_encryption": "true", "hw:ephemeral_encryption_format": "plain"},
			conflict: []string{`"plain"`, `flavor "f1" (hw:ephemeral_encryption_format=plain)`, "supports: luks"}},
		{name: "unsupported format from the source image",
			image:    map[string]string{"os_encrypt_key_id": keyID, "os_encrypt_format": "luksv2"},
			conflict: []string{`"luksv2"`, "os_encrypt_format=luksv2", "supports: luks"}},
		{name: "host without formats",
			flavor: map[string]string{"hw:ephemeral_encryption": "true"}, host: policy.Host{DefaultFormat: "luks"},
			conflict: []string{"this host's default format", "supports: none"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.host
			if h.DefaultFormat == "" {
				h = host
			}
			d, err := policy.Decide(flavor(t, tc.flavor), image(t, tc.image), h)
			if tc.conflict != nil {
				if !errors.Is(err, store.ErrConflict) {
					t.Fatalf("Decide = %+v, %v; want a conflict", d, err)
				}
				for _, s := range tc.conflict {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("conflict %q does not name %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Encrypt != tc.encrypt || d.Format != tc.format {
				t.Fatalf("Decide = %+v, want encrypt=%t format=%q", d, tc.encrypt, tc.format)
			}
		})
	}
}

func TestApplyToDisks(t *testing.T) {
	on := policy.Decision{Encrypt: true, Format: "luks", FormatFrom: "x"}
	off := policy.Decision{Off: `flavor "f1" (hw:ephemeral_encryption=false)`}
	tests := []struct {
		name     string
		d        policy.Decision
		disks    []model.Disk
		want     []model.Disk
		conflict string
	}{
		{"on: every disk", on, []model.Disk{{Name: "vda"}, {Name: "vdb", Encrypted: true}},
			[]model.Disk{{Name: "vda", Encrypted: true, EncryptionFormat: "luks"}, {Name: "vdb", Encrypted: true, EncryptionFormat: "luks"}}, ""},
		{"on: a disk asks for another format", on, []model.Disk{{Name: "vda", EncryptionFormat: "plain"}}, nil, `"plain"`},
		{"on: an explicit false is a conflict, not overridden", policy.Decision{Encrypt: true, Format: "luks", Why: `flavor "f1" (hw:ephemeral_encryption=true)`},
			[]model.Disk{{Name: "vda"}, {Name: "vdb", Unencrypted: true}}, nil,
			`disks[1] (vdb) says encrypted=false, and flavor "f1" (hw:ephemeral_encryption=true) says encrypted=true`},
		{"nothing asked: disks keep their request", policy.Decision{}, []model.Disk{{Name: "vda"}, {Name: "vdb", Encrypted: true}},
			[]model.Disk{{Name: "vda"}, {Name: "vdb", Encrypted: true}}, ""},
		{"explicit false refuses a disk's request", off, []model.Disk{{Name: "vda"}, {Name: "vdb", Encrypted: true}}, nil, `disks[1] (vdb) asks for encryption at rest, and flavor "f1"`},
		{"unsupported per-disk format", policy.Decision{}, []model.Disk{{Name: "vdb", Encrypted: true, EncryptionFormat: "luksv2"}}, nil, `"luksv2" is not supported`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.d.Apply(tc.disks, host)
			if tc.conflict != "" {
				if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), tc.conflict) {
					t.Fatalf("Apply = %v, want a conflict naming %q", err, tc.conflict)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.want {
				if tc.disks[i] != tc.want[i] {
					t.Errorf("disk %d = %+v, want %+v", i, tc.disks[i], tc.want[i])
				}
			}
		})
	}
}

func TestResizeAndRebuild(t *testing.T) {
	plain := flavor(t, nil)
	enc := flavor(t, map[string]string{"hw:ephemeral_encryption": "true"})
	encLuks, _ := policy.FlavorSettings("f2", map[string]string{"hw:ephemeral_encryption": "yes", "hw:ephemeral_encryption_format": "luks"})
	off, _ := policy.FlavorSettings("f3", map[string]string{"hw:ephemeral_encryption": "false"})
	img := image(t, nil)
	if err := policy.SameForResize(plain, off, img, host); err != nil {
		t.Errorf("unset -> false: %v", err)
	}
	if err := policy.SameForResize(enc, encLuks, img, host); err != nil {
		t.Errorf("true -> true+luks (the host default): %v", err)
	}
	err := policy.SameForResize(plain, enc, img, host)
	if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), `flavor "f1" (no ephemeral encryption settings: unencrypted)`) ||
		!strings.Contains(err.Error(), `(hw:ephemeral_encryption=true: encrypted (luks))`) {
		t.Errorf("plain -> encrypted: %v", err)
	}

	other, _ := policy.ImageSettings("img2", map[string]string{"hw_ephemeral_encryption": "true"})
	err = policy.SameForRebuild(plain, img, other, host)
	if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), `image "img"`) || !strings.Contains(err.Error(), `image "img2"`) {
		t.Errorf("rebuild onto an encrypting image: %v", err)
	}
	same, _ := policy.ImageSettings("img3", map[string]string{"hw_ephemeral_encryption": "true"})
	if err := policy.SameForRebuild(plain, other, same, host); err != nil {
		t.Errorf("rebuild between images with the same settings: %v", err)
	}
	// Both encrypt (the flavor asks), but the images' own settings differ.
	fmtImg, _ := policy.ImageSettings("img4", map[string]string{"hw_ephemeral_encryption_format": "luks"})
	if err := policy.SameForRebuild(enc, img, fmtImg, host); !errors.Is(err, store.ErrConflict) {
		t.Errorf("rebuild onto an image naming a format: %v", err)
	}
}
