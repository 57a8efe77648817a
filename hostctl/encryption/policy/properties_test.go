package policy_test

import (
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/encryption/policy"
)

func TestParseBool(t *testing.T) {
	for _, s := range []string{"true", "True", "TRUE", "yes", "Yes", "1", "on", "t", "y", " true "} {
		if b, err := policy.ParseBool(s); err != nil || !b {
			t.Errorf("ParseBool(%q) = %t, %v", s, b, err)
		}
	}
	for _, s := range []string{"false", "False", "no", "NO", "0", "off", "f", "n"} {
		if b, err := policy.ParseBool(s); err != nil || b {
			t.Errorf("ParseBool(%q) = %t, %v", s, b, err)
		}
	}
	for _, s := range []string{"", "maybe", "2", "truee", "yes please", "-1", "ja"} {
		if _, err := policy.ParseBool(s); err == nil {
			t.Errorf("ParseBool(%q) accepted", s)
		}
	}
}

func TestImageProperties(t *testing.T) {
	tests := []struct {
		name  string
		props map[string]string
		bad   []string // fields named
	}{
		{"unknown kept", map[string]string{"hw_disk_bus": "virtio", "owner_specified.openstack.sha256": "x"}, nil},
		{"encrypted image", map[string]string{"os_encrypt_key_id": keyID, "os_encrypt_format": "luks", "os_encrypt_cipher": "aes-xts-plain64",
			"os_encrypt_key_deletion_policy": "on_image_deletion", "os_decrypt_container_format": "bare", "os_decrypt_size": "1073741824"}, nil},
		{"bad bool", map[string]string{"hw_ephemeral_encryption": "sure"}, []string{"properties[hw_ephemeral_encryption]"}},
		{"bad key id", map[string]string{"os_encrypt_key_id": "not-a-uuid"}, []string{"properties[os_encrypt_key_id]"}},
		{"bad size", map[string]string{"os_encrypt_key_id": keyID, "os_decrypt_size": "-5"}, []string{"properties[os_decrypt_size]"}},
		{"bad policy", map[string]string{"os_encrypt_key_id": keyID, "os_encrypt_key_deletion_policy": "sometimes"}, []string{"properties[os_encrypt_key_deletion_policy]"}},
		{"os_encrypt_format without a key", map[string]string{"os_encrypt_format": "luks"}, []string{"properties[os_encrypt_format]"}},
		{"long value", map[string]string{"k": strings.Repeat("v", 256)}, []string{"properties[k]"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			errs := policy.CheckImageProperties("properties", tc.props)
			if len(errs) != len(tc.bad) {
				t.Fatalf("errors = %v, want on %v", errs, tc.bad)
			}
			for i, f := range tc.bad {
				if errs[i].Field != f {
					t.Errorf("error %d = %v, want on %s", i, errs[i], f)
				}
			}
		})
	}
}

func FuzzProperties(f *testing.F) {
	for _, s := range []string{"hw:ephemeral_encryption=True", "hw_ephemeral_encryption=yes", "os_decrypt_size=12", "=x", "k=", "a=b=c", "hw:ephemeral_encryption=\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, arg string) {
		k, v, err := policy.ParseProperty(arg)
		if err != nil {
			return
		}
		if k+"="+v != arg || k == "" {
			t.Fatalf("ParseProperty(%q) = %q, %q", arg, k, v)
		}
		b, berr := policy.ParseBool(v)
		norm := strings.ToLower(strings.TrimSpace(v))
		switch norm {
		case "1", "t", "true", "on", "y", "yes":
			if berr != nil || !b {
				t.Fatalf("ParseBool(%q) = %t, %v", v, b, berr)
			}
		case "0", "f", "false", "off", "n", "no":
			if berr != nil || b {
				t.Fatalf("ParseBool(%q) = %t, %v", v, b, berr)
			}
		default:
			if berr == nil {
				t.Fatalf("ParseBool(%q) accepted", v)
			}
		}
		// A known boolean key is refused exactly when ParseBool refuses
		// its value (or the shape is bad), with the key in the field.
		for _, errs := range [][]string{
			fields(policy.CheckFlavorSpecs("extra_specs", map[string]string{"hw:ephemeral_encryption": v})),
			fields(policy.CheckImageProperties("properties", map[string]string{"hw_ephemeral_encryption": v})),
		} {
			if berr != nil && len(errs) == 0 {
				t.Fatalf("value %q accepted for a boolean key", v)
			}
			for _, f := range errs {
				if !strings.Contains(f, "ephemeral_encryption]") {
					t.Fatalf("error on %q does not name the key", f)
				}
			}
		}
		// Unknown keys are never refused for their value's meaning.
		_ = policy.CheckFlavorSpecs("extra_specs", map[string]string{k: v})
		_ = policy.CheckImageProperties("properties", map[string]string{k: v})
	})
}

func fields[T interface{ Error() string }](errs []T) []string {
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = e.Error()
	}
	return out
}
